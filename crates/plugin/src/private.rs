//! Files only their owner may read, in folders only their owner may enter: the support bundle
//! and the recovery manifests describe the cluster (redacted, but still not for every user of
//! the machine they are written on).

use std::fs::File;
use std::io;
use std::path::Path;

/// Mode of every file the plugin writes.
pub const FILE_MODE: u32 = 0o600;
/// Mode of every folder the plugin creates.
pub const DIR_MODE: u32 = 0o700;

/// Creates `dir` and any missing parent, each [`DIR_MODE`]; a folder that exists keeps its mode.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(dir)
}

/// Creates (or truncates) `path` as a [`FILE_MODE`] file; a file that was there before is made
/// [`FILE_MODE`] too, before anything is written into it.
pub fn create(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    let file = options.open(path)?;
    #[cfg(unix)]
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(FILE_MODE))?;
    Ok(file)
}

/// Writes `content` to `path` as [`create`] makes it.
pub fn write(path: &Path, content: &str) -> io::Result<()> {
    io::Write::write_all(&mut create(path)?, content.as_bytes())
}

#[cfg(all(test, unix))]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_are_0600_in_0700_folders_even_when_they_were_there() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!(mode(&tmp.path().join("a")), DIR_MODE);
        assert_eq!(mode(&dir), DIR_MODE);
        let old = dir.join("old.yaml");
        std::fs::write(&old, "before").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o644)).unwrap();
        write(&old, "after").unwrap();
        assert_eq!(mode(&old), FILE_MODE);
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "after");
        write(&dir.join("new.yaml"), "x").unwrap();
        assert_eq!(mode(&dir.join("new.yaml")), FILE_MODE);
    }
}
