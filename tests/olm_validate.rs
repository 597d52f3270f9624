//! The OLM bundle against OLM's own validators (`hack/olm.sh validate`, built from
//! github.com/operator-framework/api): the committed `olm/` passes with no error and no warning,
//! and a deliberately broken copy fails with the validator's message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};

fn validate(dir: &Path) -> Output {
    Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/olm.sh"))
        .arg("validate")
        .arg(dir)
        .output()
        .expect("run hack/olm.sh validate")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

#[test]
fn the_committed_bundle_passes_and_a_bundle_with_a_crd_the_csv_does_not_own_fails() {
    let olm = Path::new(env!("CARGO_MANIFEST_DIR")).join("olm");
    let out = validate(&olm);
    assert!(out.status.success(), "olm/ does not validate:\n{}", text(&out));

    // A CRD in the bundle that the CSV does not list as owned.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("olm");
    copy_dir(&olm, &broken);
    let crd = std::fs::read_to_string(olm.join("manifests/storageos.com_jobs.yaml"))
        .unwrap()
        .replace("jobs.storageos.com", "widgets.storageos.com")
        .replace("kind: Job", "kind: Widget")
        .replace("listKind: JobList", "listKind: WidgetList")
        .replace("plural: jobs", "plural: widgets")
        .replace("singular: job", "singular: widget");
    std::fs::write(broken.join("manifests/storageos.com_widgets.yaml"), crd).unwrap();
    let out = validate(&broken);
    let msg = text(&out);
    assert!(
        !out.status.success(),
        "a CRD the CSV does not own passed validation:\n{msg}"
    );
    assert!(
        msg.contains("CRD \"storageos.com/v1, Kind=Widget\" is present in bundle")
            && msg.contains("but not defined in CSV"),
        "the validator's message is shown:\n{msg}"
    );
}
