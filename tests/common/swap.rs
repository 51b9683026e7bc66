//! The attacker who swaps a model while it is read: a small process (Python, inotify through
//! `ctypes`) that watches the model's directory and, once readers have closed the model `n`
//! times, replaces its bytes — in place (truncated and rewritten: the same inode) or by a rename
//! (a new inode at the path) — then says so. It runs as another user (uid 65534, for real) or,
//! playing a framework that rewrites its own cache, as this one holding the cache's lock first.
//! It waits for events, never for time: when the test is done it closes the helper's stdin, and
//! a helper that saw fewer than `n` reads says how many it saw.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

/// How the model is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swap {
    /// Truncated and rewritten: the same inode.
    InPlace,
    /// Another file renamed over it: a new inode.
    Rename,
}

impl Swap {
    fn word(self) -> &'static str {
        match self {
            Swap::InPlace => "in-place",
            Swap::Rename => "rename",
        }
    }
}

const HELPER: &str = r#"
import ctypes, fcntl, os, select, struct, sys
model, n, how, source, lock, marker = sys.argv[1:7]
n = int(n)
evil = open(source, 'rb').read()
d, name = os.path.split(model)
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
IN_CLOSE_NOWRITE = 0x10
if fd < 0 or libc.inotify_add_watch(fd, d.encode(), IN_CLOSE_NOWRITE) < 0:
    sys.exit('inotify: ' + os.strerror(ctypes.get_errno()))
print('watching', flush=True)
seen = 0
while True:
    ready, _, _ = select.select([fd, sys.stdin], [], [])
    if fd not in ready:
        print('seen %d' % seen, flush=True)
        sys.exit(0)
    buf = os.read(fd, 65536)
    i = 0
    while i < len(buf):
        _, mask, _, ln = struct.unpack_from('iIII', buf, i)
        got = buf[i + 16:i + 16 + ln].split(b'\0')[0]
        i += 16 + ln
        if got != name.encode():
            continue
        seen += 1
        if seen < n:
            continue
        if lock:
            held = open(lock, 'rb')
            fcntl.flock(held, fcntl.LOCK_EX)
        done = bool(marker) and os.path.exists(marker)
        if how == 'in-place':
            w = os.open(model, os.O_WRONLY | os.O_TRUNC)
        else:
            tmp = os.path.join(d, '.swap-' + name)
            w = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        view = memoryview(evil)
        while view:
            view = view[os.write(w, view):]
        os.close(w)
        if how != 'in-place':
            os.rename(tmp, model)
        print('swapped %d %s' % (seen, 'after-done' if done else 'before-done'), flush=True)
        sys.exit(0)
"#;

/// What the attacker did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swapped {
    /// It replaced the model after this many reads; `done_before`: the marker file existed then
    /// (the result was already published when the model changed).
    After { reads: usize, done_before: bool },
    /// Readers closed the model only this many times: it did nothing.
    Never { reads: usize },
}

/// A running attacker.
pub struct Swapper {
    child: Child,
    out: BufReader<ChildStdout>,
}

/// Whether this process can play another user (it must be root).
pub fn can_play_another_user() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Swapper {
    /// Watch `model` and, after the `n`th close of it by a reader, replace its bytes with those
    /// of `with`, `how`; as `uid` (its group the same number); holding an `flock` on `lock`
    /// first when given (a framework that honours its cache's lock), and noting whether `marker`
    /// existed then. Returns once the watch is in place.
    pub fn start(
        model: &Path,
        n: usize,
        how: Swap,
        with: &Path,
        uid: u32,
        lock: Option<&Path>,
        marker: Option<&Path>,
    ) -> Swapper {
        let mut c = Command::new("python3");
        c.arg("-c")
            .arg(HELPER)
            .arg(model)
            .arg(n.to_string())
            .arg(how.word())
            .arg(with)
            .arg(lock.map(Path::as_os_str).unwrap_or_default())
            .arg(marker.map(Path::as_os_str).unwrap_or_default())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if uid != 0 {
            c.uid(uid).gid(uid);
        }
        let mut child = c.spawn().expect("python3 runs the swapping helper");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "watching", "the helper did not start watching");
        Swapper { child, out }
    }

    /// Nothing more will read the model: what the attacker did.
    pub fn finish(mut self) -> Swapped {
        if let Some(mut stdin) = self.child.stdin.take() {
            let _ = stdin.flush();
        }
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the swapping helper failed: {line}");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["swapped", n, when] => Swapped::After {
                reads: n.parse().unwrap(),
                done_before: *when == "after-done",
            },
            ["seen", n] => Swapped::Never {
                reads: n.parse().unwrap(),
            },
            _ => panic!("the swapping helper said {line:?}"),
        }
    }
}
