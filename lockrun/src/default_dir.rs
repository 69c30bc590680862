//! The lock directory of a run without `--backend` or `LOCK_URL`.

use lock_core::{Error, ErrorKind};

/// The lock directory without `--backend` or `LOCK_URL`: one place whatever the
/// environment, so that the same job started from cron, a systemd service and a login
/// shell excludes itself. No environment variable moves it (`XDG_RUNTIME_DIR` is set in a
/// login session only, `TMPDIR` by some shells only, and a service with `PrivateTmp=` sees
/// a /tmp of its own): /run/lock, the system's directory for lock files, where it is open
/// to every user (sticky and world-writable, as on Debian and Ubuntu), else /tmp. One
/// directory per user: the file backend keeps its directory private to its owner.
pub(crate) fn default_backend() -> Result<String, Error> {
    use std::os::unix::fs::PermissionsExt;
    let open_to_all = |dir: &str| {
        std::fs::metadata(dir)
            .is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o1777 == 0o1777)
    };
    let base = match open_to_all("/run/lock") {
        true => "/run/lock",
        false => "/tmp",
    };
    default_backend_in(base, nix::unistd::getuid().as_raw())
}

/// The default lock directory of user `uid` under `base`, refused when another user made it
/// first: anyone may create names in a directory open to all, so another local user can
/// make `lockrun-UID` before its owner's first run. The file backend would refuse it too,
/// but saying only that it is not this user's; this says how it came about and what to do.
fn default_backend_in(base: &str, uid: u32) -> Result<String, Error> {
    use std::os::unix::fs::MetadataExt;
    let dir = format!("{base}/lockrun-{uid}");
    if let Ok(meta) = std::fs::symlink_metadata(&dir) {
        if meta.uid() != uid {
            return Err(Error::new(
                ErrorKind::Config,
                "lockrun",
                lock_core::Operation::Connect,
                format!(
                    "{dir}, the default lock directory of uid {uid}, belongs to uid {}: another \
                     local user made it first (anyone may create names in {base}), and locks \
                     there would not be yours alone. Ask root to remove it (`rm -r {dir}`), or \
                     give every run of the job the same --backend file:///a/directory/of/yours",
                    meta.uid()
                ),
            ));
        }
    }
    Ok(format!("file://{dir}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another user's `lockrun-UID` (made before this user's first run) is refused with what
    /// happened and what to do; this user's own, or none yet, is the default.
    #[test]
    fn a_default_directory_another_user_made_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let base_str = base.path().to_str().unwrap();
        let me = nix::unistd::getuid().as_raw();
        let other = me.wrapping_add(1);
        assert_eq!(
            default_backend_in(base_str, other).unwrap(),
            format!("file://{base_str}/lockrun-{other}")
        );
        // Made by this user, as it would be by another one for `other`.
        std::fs::create_dir(base.path().join(format!("lockrun-{other}"))).unwrap();
        let e = default_backend_in(base_str, other).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Config);
        let said = e.to_string();
        assert!(said.contains(&format!("belongs to uid {me}")), "{said}");
        assert!(said.contains("another local user made it first"), "{said}");
        assert!(said.contains("--backend"), "{said}");
        std::fs::create_dir(base.path().join(format!("lockrun-{me}"))).unwrap();
        assert!(default_backend_in(base_str, me).is_ok());
    }
}
