use std::sync::Arc;

use super::*;

fn file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.json");
    (dir, path)
}

#[test]
fn a_stale_token_is_refused_and_the_content_stays() {
    let (_dir, path) = file();
    write(&path, Fencing(5), b"five").unwrap();
    write(&path, Fencing(9), b"nine").unwrap();
    let e = write(&path, Fencing(5), b"late five").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StaleToken);
    let tokens = e.stale_token().expect("both tokens");
    assert_eq!((tokens.presented, tokens.highest), (Fencing(5), Fencing(9)));
    assert!(e.to_string().contains("data.json"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), b"nine");
    assert_eq!(highest(&path).unwrap(), Some(Fencing(9)));
}

#[test]
fn the_same_token_writes_again() {
    let (_dir, path) = file();
    write(&path, Fencing(3), b"one").unwrap();
    write(&path, Fencing(3), b"two").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"two");
    assert_eq!(highest(&path).unwrap(), Some(Fencing(3)));
}

/// A holder that crashed after its token reached the fence, before its content replaced
/// the file: older holders stay out, and it may write again.
#[test]
fn a_fence_ahead_of_the_content_keeps_older_holders_out() {
    let (_dir, path) = file();
    write(&path, Fencing(5), b"five").unwrap();
    std::fs::write(path.with_file_name("data.json.fence"), "7").unwrap();
    assert_eq!(
        write(&path, Fencing(6), b"six").unwrap_err().kind(),
        ErrorKind::StaleToken
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"five");
    write(&path, Fencing(7), b"seven").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"seven");
}

#[test]
fn a_fence_file_that_holds_no_token_is_corrupt() {
    let (_dir, path) = file();
    std::fs::write(path.with_file_name("data.json.fence"), "not a token").unwrap();
    let e = write(&path, Fencing(1), b"x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corrupt);
    assert!(!path.exists(), "nothing written");
}

#[test]
fn a_path_without_a_file_name_is_refused() {
    let e = write(Path::new("/"), Fencing(1), b"x").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
}

/// Eight writers at once, tokens 1 to 8: whatever the order, the file ends with the
/// content of token 8, and the fence says 8.
#[test]
fn concurrent_writers_end_with_the_highest_token() {
    for _ in 0..20 {
        let (_dir, path) = file();
        let path = Arc::new(path);
        let writers: Vec<_> = (1..=8u64)
            .map(|t| {
                let path = Arc::clone(&path);
                std::thread::spawn(move || {
                    match write(&path, Fencing(t), t.to_string().as_bytes()) {
                        Ok(()) => {}
                        Err(e) => assert_eq!(e.kind(), ErrorKind::StaleToken),
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(std::fs::read(&*path).unwrap(), b"8");
        assert_eq!(highest(&path).unwrap(), Some(Fencing(8)));
    }
}

#[tokio::test]
async fn the_async_write_is_the_same_write() {
    let (_dir, path) = file();
    write_async(path.clone(), Fencing(2), b"two".to_vec())
        .await
        .unwrap();
    let e = write_async(path.clone(), Fencing(1), b"one".to_vec())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StaleToken);
    assert_eq!(std::fs::read(&path).unwrap(), b"two");
}

/// A report others read (0644) stays readable after a fenced write; a new file gets 0666
/// less the umask, as `File::create` makes it; the owner is kept when root writes.
#[test]
fn the_content_keeps_the_replaced_file_s_mode_and_owner() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let (_dir, path) = file();
    write(&path, Fencing(1), b"new").unwrap();
    let umask = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Umask:"))
        .map(|m| u32::from_str_radix(m.trim(), 8).unwrap())
        .unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&path), 0o666 & !umask, "a new file");
    for wanted in [0o644, 0o640, 0o600, 0o664] {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(wanted)).unwrap();
        write(&path, Fencing(2), b"again").unwrap();
        assert_eq!(mode(&path), wanted, "after a fenced write");
    }
    // A file this process made is its effective user's: root may give it away.
    if std::fs::metadata(&path).unwrap().uid() == 0 {
        std::os::unix::fs::chown(&path, Some(4321), Some(4322)).unwrap();
        write(&path, Fencing(3), b"as root").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (4321, 4322), "owner kept");
    }
}

/// `x.fence` is the fence of `x`: a fenced write to a file of that name would overwrite
/// it (and the other fence files alike), so it is refused, and `x`'s fence still holds.
#[test]
fn a_name_of_the_fence_s_own_files_is_refused() {
    let (dir, path) = file();
    write(&path, Fencing(9), b"nine").unwrap();
    for suffix in FENCE_SUFFIXES {
        let other = dir.path().join(format!("data.json{suffix}"));
        let e = write(&other, Fencing(1), b"1").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{suffix}: {e}");
        assert!(e.to_string().contains(suffix), "{e}");
    }
    assert_eq!(
        write(&path, Fencing(5), b"five").unwrap_err().kind(),
        ErrorKind::StaleToken
    );
    // A name that only contains the suffix is fine.
    write(&dir.path().join("a.fence.json"), Fencing(1), b"1").unwrap();
}
