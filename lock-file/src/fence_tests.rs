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
