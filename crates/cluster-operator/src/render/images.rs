//! Container images: the one published list of this release, `RELATED_IMAGE_*` overrides from
//! the operator's environment (OLM, mirrors), and the CR's `spec.images` over both.
//!
//! Only the kube-scheduler's default follows the cluster's Kubernetes minor, and only to a
//! minor this release knows ([`DefaultImages::for_kubernetes`]): a tag computed from any version
//! string named releases that did not exist and broke installs of the Go operator.

use std::collections::BTreeMap;

use serde::Serialize;

use super::go_defaults::{GoDefault, go_defaults_in, without_go_defaults};
use crate::crd::ContainerImages;

/// The images of this release. Also the list to mirror for an air-gapped install. The CSI
/// sidecars come from Kubernetes' own registry (`registry.k8s.io/sig-storage`, the same releases
/// the Go operator named on the frozen `quay.io/k8scsi`, which no longer receives images); a
/// Go-written `quay.io/k8scsi` value in an adopted CR is kept as if pinned (`go_defaults`).
pub const BUILTIN_IMAGES: [(&str, &str); 8] = [
    ("RELATED_IMAGE_STORAGEOS_NODE", "storageos/node:v2.4.2"),
    ("RELATED_IMAGE_STORAGEOS_INIT", "storageos/init:v2.1.0"),
    (
        "RELATED_IMAGE_CSIV1_NODE_DRIVER_REGISTRAR",
        "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.1.0",
    ),
    (
        "RELATED_IMAGE_CSIV1_EXTERNAL_PROVISIONER",
        "storageos/csi-provisioner:v2.1.1-patched",
    ),
    (
        "RELATED_IMAGE_CSIV1_EXTERNAL_ATTACHER_V3",
        "registry.k8s.io/sig-storage/csi-attacher:v3.1.0",
    ),
    (
        "RELATED_IMAGE_CSIV1_EXTERNAL_RESIZER",
        "registry.k8s.io/sig-storage/csi-resizer:v1.1.0",
    ),
    (
        "RELATED_IMAGE_CSIV1_LIVENESS_PROBE",
        "registry.k8s.io/sig-storage/livenessprobe:v2.2.0",
    ),
    ("RELATED_IMAGE_KUBE_SCHEDULER", "registry.k8s.io/kube-scheduler:v1.33.5"),
];

/// The kube-scheduler's `RELATED_IMAGE_*` variable. The install does not set it (see
/// [`shipped_env_images`]): unset, the scheduler follows the cluster's minor; any value pins it.
pub const KUBE_SCHEDULER_ENV: &str = "RELATED_IMAGE_KUBE_SCHEDULER";

/// The `RELATED_IMAGE_*` variables the install sets on the operator: every built-in image but
/// the kube-scheduler's, since a shipped value would pin it to one minor on every cluster
/// (version skew on any other minor); it is left for a user to set.
pub fn shipped_env_images() -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    BUILTIN_IMAGES.iter().filter(|(name, _)| *name != KUBE_SCHEDULER_ENV)
}

/// Every kube-scheduler image the unpinned default can be, one per Kubernetes minor from
/// [`super::MIN_KUBERNETES`] to [`NEWEST_KNOWN_MINOR`]: what a mirror for a disconnected
/// install must hold (the OLM bundle's `relatedImages` lists them).
pub fn kube_scheduler_images() -> Vec<((u64, u64), String)> {
    let defaults = DefaultImages::default();
    let (major, newest) = NEWEST_KNOWN_MINOR;
    (super::MIN_KUBERNETES.minor..=newest)
        .map(|minor| {
            let version = semver::Version::new(major, minor, 0);
            ((major, minor), defaults.for_kubernetes(Some(&version)).kube_scheduler)
        })
        .collect()
}

/// Environment variable naming the api-manager image. Unset: the operator's own image runs
/// `storageos-operator api-manager`.
pub const API_MANAGER_ENV: &str = "RELATED_IMAGE_API_MANAGER";

/// The operator's default images, before the CR's overrides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultImages {
    /// StorageOS node.
    pub node: String,
    /// StorageOS init container.
    pub init: String,
    /// api-manager; None runs it from the operator's own image.
    pub api_manager: Option<String>,
    /// CSI node driver registrar.
    pub csi_node_driver_registrar: String,
    /// CSI external provisioner.
    pub csi_external_provisioner: String,
    /// CSI external attacher.
    pub csi_external_attacher: String,
    /// CSI external resizer.
    pub csi_external_resizer: String,
    /// CSI liveness probe.
    pub csi_liveness_probe: String,
    /// kube-scheduler of the scheduler extender.
    pub kube_scheduler: String,
    /// Whether `RELATED_IMAGE_KUBE_SCHEDULER` set it: a user's value, as the install never sets
    /// it (then it does not follow the cluster's Kubernetes minor:
    /// [`DefaultImages::for_kubernetes`]).
    pub kube_scheduler_pinned: bool,
}

impl Default for DefaultImages {
    fn default() -> Self {
        Self::from_env_map(&BTreeMap::new())
    }
}

impl DefaultImages {
    /// The built-in list with `RELATED_IMAGE_*` values from `env` over it; empty values are
    /// ignored (OLM sets them to "" to mean "use the default").
    pub fn from_env_map(env: &BTreeMap<String, String>) -> Self {
        let pick = |name: &str| -> String {
            match env.get(name) {
                Some(v) if !v.trim().is_empty() => v.trim().to_string(),
                _ => BUILTIN_IMAGES
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, image)| (*image).to_string())
                    .unwrap_or_default(),
            }
        };
        Self {
            node: pick("RELATED_IMAGE_STORAGEOS_NODE"),
            init: pick("RELATED_IMAGE_STORAGEOS_INIT"),
            api_manager: env
                .get(API_MANAGER_ENV)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty()),
            csi_node_driver_registrar: pick("RELATED_IMAGE_CSIV1_NODE_DRIVER_REGISTRAR"),
            csi_external_provisioner: pick("RELATED_IMAGE_CSIV1_EXTERNAL_PROVISIONER"),
            csi_external_attacher: pick("RELATED_IMAGE_CSIV1_EXTERNAL_ATTACHER_V3"),
            csi_external_resizer: pick("RELATED_IMAGE_CSIV1_EXTERNAL_RESIZER"),
            csi_liveness_probe: pick("RELATED_IMAGE_CSIV1_LIVENESS_PROBE"),
            kube_scheduler: pick(KUBE_SCHEDULER_ENV),
            kube_scheduler_pinned: env.get(KUBE_SCHEDULER_ENV).is_some_and(|v| !v.trim().is_empty()),
        }
    }

    /// The defaults for a cluster running Kubernetes `k8s`: the kube-scheduler is the default
    /// image's repository at the cluster's own minor (`vMAJOR.MINOR.0`, or the built-in tag when
    /// that is of the same minor already), which keeps it within
    /// the upstream version-skew policy (never newer than the apiserver, at most one minor
    /// older). A cluster newer than [`NEWEST_KNOWN_MINOR`] gets that minor's, so the computed tag
    /// always names a published release (a tag computed from any version string, as the Go
    /// operator did, broke installs). `RELATED_IMAGE_KUBE_SCHEDULER`, or a CR's
    /// `kubeSchedulerContainer`, pins it; with no version known, the built-in default stands.
    pub fn for_kubernetes(&self, k8s: Option<&semver::Version>) -> Self {
        let mut out = self.clone();
        let minor = k8s.map(|v| (v.major, v.minor).min(NEWEST_KNOWN_MINOR));
        if let (Some((major, minor)), false) = (minor, self.kube_scheduler_pinned)
            && let Some((repository, tag)) = self.kube_scheduler.rsplit_once(':')
            && !repository.contains('@')
            // The built-in default is already of that minor (and a later patch than .0).
            && !tag.starts_with(&format!("v{major}.{minor}."))
        {
            out.kube_scheduler = format!("{repository}:v{major}.{minor}.0");
        }
        out
    }
}

/// Reads the `RELATED_IMAGE_*` variables of this process. The only impure piece: `build` takes
/// the result, so it stays a pure function.
pub fn default_images_from_env() -> DefaultImages {
    let env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("RELATED_IMAGE_"))
        .collect();
    DefaultImages::from_env_map(&env)
}

/// The images in use, after the CR's overrides; `status.images` shows this.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Images {
    /// StorageOS node.
    pub node_container: String,
    /// StorageOS init container.
    pub init_container: String,
    /// api-manager.
    pub api_manager_container: String,
    /// CSI node driver registrar.
    pub csi_node_driver_registrar_container: String,
    /// CSI external provisioner.
    pub csi_external_provisioner_container: String,
    /// CSI external attacher.
    pub csi_external_attacher_container: String,
    /// CSI external resizer.
    pub csi_external_resizer_container: String,
    /// CSI liveness probe.
    pub csi_liveness_probe_container: String,
    /// kube-scheduler.
    pub kube_scheduler_container: String,
}

/// The newest Kubernetes minor this release knows a kube-scheduler of (the plane's, in
/// hack/versions.env; `checks::TESTED_KUBERNETES` is the same).
pub const NEWEST_KNOWN_MINOR: (u64, u64) = (1, 36);

/// Resolves every image: the CR's non-empty value, else the default; the api-manager falls back
/// to the operator's own image. Values the Go operator wrote back as its defaults count as unset.
pub fn resolve_images(spec: Option<&ContainerImages>, defaults: &DefaultImages, operator_image: &str) -> Images {
    let spec = spec.map(without_go_defaults).unwrap_or_default();
    let pick = |v: Option<String>, d: &str| v.filter(|s| !s.trim().is_empty()).unwrap_or_else(|| d.to_string());
    Images {
        node_container: pick(spec.node_container, &defaults.node),
        init_container: pick(spec.init_container, &defaults.init),
        api_manager_container: pick(
            spec.api_manager_container,
            defaults.api_manager.as_deref().unwrap_or(operator_image),
        ),
        csi_node_driver_registrar_container: pick(
            spec.csi_node_driver_registrar_container,
            &defaults.csi_node_driver_registrar,
        ),
        csi_external_provisioner_container: pick(
            spec.csi_external_provisioner_container,
            &defaults.csi_external_provisioner,
        ),
        csi_external_attacher_container: pick(spec.csi_external_attacher_container, &defaults.csi_external_attacher),
        csi_external_resizer_container: pick(spec.csi_external_resizer_container, &defaults.csi_external_resizer),
        csi_liveness_probe_container: pick(spec.csi_liveness_probe_container, &defaults.csi_liveness_probe),
        kube_scheduler_container: pick(spec.kube_scheduler_container, &defaults.kube_scheduler),
    }
}

/// An image field of the CR holding a Go default, and the image used instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replaced {
    /// The field and its Go value.
    pub go: GoDefault,
    /// The image this operator runs instead.
    pub now: String,
}

/// The Go defaults in `spec` that resolve to another image (a Go default equal to ours, or in a
/// field nothing uses, replaces nothing and is not listed).
pub fn replaced_go_defaults(
    spec: Option<&ContainerImages>,
    defaults: &DefaultImages,
    operator_image: &str,
) -> Vec<Replaced> {
    let Some(spec) = spec else { return Vec::new() };
    let resolved = serde_json::to_value(resolve_images(Some(spec), defaults, operator_image)).unwrap_or_default();
    go_defaults_in(spec)
        .into_iter()
        .filter_map(|go| {
            let now = resolved.get(go.field)?.as_str()?.to_string();
            (now != go.value.trim()).then_some(Replaced { go, now })
        })
        .collect()
}

/// The status message naming each replaced field, or None when nothing was replaced.
pub fn replaced_message(replaced: &[Replaced]) -> Option<String> {
    if replaced.is_empty() {
        return None;
    }
    let each = replaced
        .iter()
        .map(|r| format!("spec.images.{} {} -> {}", r.go.field, r.go.value, r.now))
        .collect::<Vec<_>>()
        .join(", ");
    Some(format!(
        "the Go operator wrote its default images into the spec; they count as unset and this operator's images run instead: {each}. Remove these fields from spec.images, or set another value to pin an image"
    ))
}

impl Images {
    /// The same images as the CRD's status type.
    pub fn to_container_images(&self) -> ContainerImages {
        ContainerImages {
            node_container: Some(self.node_container.clone()),
            init_container: Some(self.init_container.clone()),
            api_manager_container: Some(self.api_manager_container.clone()),
            csi_node_driver_registrar_container: Some(self.csi_node_driver_registrar_container.clone()),
            csi_external_provisioner_container: Some(self.csi_external_provisioner_container.clone()),
            csi_external_attacher_container: Some(self.csi_external_attacher_container.clone()),
            csi_external_resizer_container: Some(self.csi_external_resizer_container.clone()),
            csi_liveness_probe_container: Some(self.csi_liveness_probe_container.clone()),
            kube_scheduler_container: Some(self.kube_scheduler_container.clone()),
            ..Default::default()
        }
    }
}

/// The `kubescheduler.config.k8s.io` version a kube-scheduler image reads, from its tag: `v1`
/// from 1.25, `v1beta3` in 1.23–1.24, `v1beta2` in 1.22, `v1beta1` in 1.19–1.21. A tag that is
/// not a version (a digest, `latest`, a mirror's own scheme) is taken to be current. Err(minor)
/// for a 1.x older than 1.19, which reads no KubeSchedulerConfiguration with extenders.
pub fn scheduler_config_version(image: &str) -> Result<&'static str, u64> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let Some((_, tag)) = last.split_once(':') else {
        return Ok("v1");
    };
    let mut parts = tag.trim_start_matches('v').split(['.', '-', '+']);
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next().map(str::parse::<u64>), parts.next().map(str::parse::<u64>))
    else {
        return Ok("v1");
    };
    Ok(match (major, minor) {
        (1, m) if m < 19 => return Err(m),
        (1, 19..=21) => "v1beta1",
        (1, 22) => "v1beta2",
        (1, 23..=24) => "v1beta3",
        _ => "v1",
    })
}

/// Whether `image` is the Go api-manager (`…/api-manager:<tag>`), whose binary is `/manager`,
/// rather than an image of this operator. Go-era CRs carry `storageos/api-manager:v1.1.2` in
/// `spec.images` because the Go operator wrote its defaults back into the spec.
pub fn is_go_api_manager(image: &str) -> bool {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let repo = last.split(':').next().unwrap_or(last);
    repo == "api-manager"
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {

    #[test]
    fn the_default_kube_scheduler_follows_the_cluster_minor_unless_pinned() {
        let d = DefaultImages::default();
        let v = semver::Version::new(1, 36, 3);
        assert_eq!(
            d.for_kubernetes(Some(&v)).kube_scheduler,
            "registry.k8s.io/kube-scheduler:v1.36.0"
        );
        assert_eq!(d.for_kubernetes(None).kube_scheduler, d.kube_scheduler);
        let newer = semver::Version::new(1, 39, 1);
        assert_eq!(
            d.for_kubernetes(Some(&newer)).kube_scheduler,
            "registry.k8s.io/kube-scheduler:v1.36.0"
        );
        let same_minor = semver::Version::new(1, 33, 9);
        assert_eq!(d.for_kubernetes(Some(&same_minor)).kube_scheduler, d.kube_scheduler);
        let env = BTreeMap::from([(
            "RELATED_IMAGE_KUBE_SCHEDULER".to_string(),
            "mirror/ks:v1.35.2".to_string(),
        )]);
        let pinned = DefaultImages::from_env_map(&env);
        assert_eq!(pinned.for_kubernetes(Some(&v)).kube_scheduler, "mirror/ks:v1.35.2");
        // The scheduler configuration version follows the image.
        assert_eq!(
            scheduler_config_version(&d.for_kubernetes(Some(&v)).kube_scheduler),
            Ok("v1")
        );
    }

    use super::*;

    #[test]
    fn the_shipped_env_leaves_the_kube_scheduler_unset_and_a_mirror_gets_every_minor_s() {
        assert!(shipped_env_images().all(|(name, _)| *name != KUBE_SCHEDULER_ENV));
        assert_eq!(shipped_env_images().count(), BUILTIN_IMAGES.len() - 1);
        let all = kube_scheduler_images();
        assert_eq!(
            all,
            [
                ((1, 33), "registry.k8s.io/kube-scheduler:v1.33.5".to_string()),
                ((1, 34), "registry.k8s.io/kube-scheduler:v1.34.0".to_string()),
                ((1, 35), "registry.k8s.io/kube-scheduler:v1.35.0".to_string()),
                ((1, 36), "registry.k8s.io/kube-scheduler:v1.36.0".to_string()),
            ]
        );
    }

    #[test]
    fn builtin_list_without_env() {
        let d = DefaultImages::default();
        assert_eq!(d.node, "storageos/node:v2.4.2");
        assert_eq!(
            d.csi_external_attacher,
            "registry.k8s.io/sig-storage/csi-attacher:v3.1.0"
        );
        assert_eq!(d.kube_scheduler, "registry.k8s.io/kube-scheduler:v1.33.5");
        assert_eq!(d.api_manager, None);
    }

    #[test]
    fn env_overrides_and_empty_values_are_ignored() {
        let env = BTreeMap::from([
            ("RELATED_IMAGE_STORAGEOS_NODE".to_string(), "mirror/node:v9".to_string()),
            ("RELATED_IMAGE_STORAGEOS_INIT".to_string(), "  ".to_string()),
            (
                "RELATED_IMAGE_API_MANAGER".to_string(),
                "mirror/api-manager:v1".to_string(),
            ),
            ("RELATED_IMAGE_KUBE_SCHEDULER".to_string(), "mirror/ks:v1".to_string()),
        ]);
        let d = DefaultImages::from_env_map(&env);
        assert_eq!(d.node, "mirror/node:v9");
        assert_eq!(d.init, "storageos/init:v2.1.0");
        assert_eq!(d.api_manager.as_deref(), Some("mirror/api-manager:v1"));
        assert_eq!(d.kube_scheduler, "mirror/ks:v1");
    }

    #[test]
    fn cr_over_env_over_builtin_and_operator_image_for_api_manager() {
        let spec = ContainerImages {
            node_container: Some("cr/node:v1".into()),
            init_container: Some(String::new()),
            ..Default::default()
        };
        let images = resolve_images(Some(&spec), &DefaultImages::default(), "op:1");
        assert_eq!(images.node_container, "cr/node:v1");
        assert_eq!(images.init_container, "storageos/init:v2.1.0");
        assert_eq!(images.api_manager_container, "op:1");
        assert_eq!(
            images.to_container_images().api_manager_container.as_deref(),
            Some("op:1")
        );
    }

    #[test]
    fn go_written_defaults_are_replaced_and_named() {
        let spec = ContainerImages {
            node_container: Some("storageos/node:v2.4.2".into()),
            api_manager_container: Some("storageos/api-manager:v1.1.2".into()),
            kube_scheduler_container: Some("k8s.gcr.io/kube-scheduler:v1.21.0".into()),
            csi_cluster_driver_registrar_container: Some("quay.io/k8scsi/csi-cluster-driver-registrar:v1.0.1".into()),
            ..Default::default()
        };
        let defaults = DefaultImages::default();
        let images = resolve_images(Some(&spec), &defaults, "op:1");
        assert_eq!(images.api_manager_container, "op:1");
        assert_eq!(
            images.kube_scheduler_container,
            "registry.k8s.io/kube-scheduler:v1.33.5"
        );
        assert_eq!(images.node_container, "storageos/node:v2.4.2");
        let replaced = replaced_go_defaults(Some(&spec), &defaults, "op:1");
        let fields: Vec<_> = replaced.iter().map(|r| r.go.field).collect();
        // The node image is the same as ours; the cluster registrar is not used: neither replaced.
        assert_eq!(fields, ["apiManagerContainer", "kubeSchedulerContainer"]);
        let message = replaced_message(&replaced).unwrap();
        assert!(
            message.contains("spec.images.apiManagerContainer storageos/api-manager:v1.1.2 -> op:1"),
            "{message}"
        );
        assert_eq!(replaced_message(&[]), None);
        assert_eq!(replaced_go_defaults(None, &defaults, "op:1"), []);
    }

    #[test]
    fn scheduler_config_version_follows_the_image_tag() {
        for (image, version) in [
            ("registry.k8s.io/kube-scheduler:v1.33.5", Ok("v1")),
            ("registry.k8s.io/kube-scheduler:v1.25.0", Ok("v1")),
            ("mirror.local:5000/kube-scheduler:v1.24.17", Ok("v1beta3")),
            ("registry.k8s.io/kube-scheduler:v1.23.4", Ok("v1beta3")),
            ("registry.k8s.io/kube-scheduler:v1.22.1-rc.0", Ok("v1beta2")),
            ("k8s.gcr.io/kube-scheduler:v1.20.5", Ok("v1beta1")),
            ("k8s.gcr.io/kube-scheduler:v1.18.2", Err(18)),
            ("registry.k8s.io/kube-scheduler:latest", Ok("v1")),
            ("registry.k8s.io/kube-scheduler@sha256:abc", Ok("v1")),
            ("kube-scheduler", Ok("v1")),
            ("registry.k8s.io/kube-scheduler:v2.0.0", Ok("v1")),
        ] {
            assert_eq!(scheduler_config_version(image), version, "{image}");
        }
    }

    #[test]
    fn go_api_manager_is_recognised_by_repository_name() {
        assert!(is_go_api_manager("storageos/api-manager:v1.1.2"));
        assert!(is_go_api_manager("reg.local:5000/mirror/api-manager@sha256:abc"));
        assert!(!is_go_api_manager("storageos/operator:v3"));
        assert!(!is_go_api_manager("reg.local:5000/api-manager-rs:v1"));
    }
}
