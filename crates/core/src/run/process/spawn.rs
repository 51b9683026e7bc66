//! Starting a tool without copying the caller's address space: [`spawn`] clones with
//! `CLONE_VM | CLONE_VFORK` (as glibc's `posix_spawn` does) instead of `fork`, so no page tables
//! are copied and no copy-on-write faults follow, however large the calling process is.
//!
//! The child shares the parent's memory until it calls `execve`, and the calling thread is
//! suspended meanwhile. So everything it needs is built in the parent first — the program path(s)
//! to try, argv, envp, the working directory, the standard descriptors, its own stack — and the
//! child makes only async-signal-safe system calls: no allocation, no locks, no Rust I/O. Signals
//! are blocked around the clone so no handler runs on the child's stack; the child resets every
//! caught signal and SIGPIPE to the default and starts with an empty signal mask (what a
//! `std::process::Command` child gets). Then, in order: its own process group, the parent-death
//! signal (SIGKILL, and it exits if the parent is already gone), the three standard descriptors,
//! `chdir`, `execve`. A failing step stores its errno where the parent reads it once the clone
//! returns, and the child `_exit`s with 127.
//!
//! A program name without a `/` is looked up as `execvp` does, in the child's `PATH` (or
//! `/bin:/usr/bin` without one), after the `chdir`; a file the kernel cannot run (`ENOEXEC`) is run
//! by `/bin/sh`, as `execvp` does too.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::ptr;

use rustix::process::Signal;

use super::Spec;
use crate::run::os::{die_with_parent, pipe, reap};

/// The size of the child's stack (below it, one inaccessible guard page).
const STACK_BYTES: usize = 64 * 1024;
/// The shell that runs a file the kernel cannot execute (as `execvp` does).
const SHELL: &[u8] = b"/bin/sh\0";
/// `execvp`'s search path when the environment has no `PATH`.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// A started child: its pid and the parent's ends of its stdout and stderr pipes.
pub(super) struct Spawned {
    pub pid: u32,
    pub stdout: File,
    pub stderr: File,
}

/// Start `spec`'s program as described in the module documentation; `parent` is this process's
/// pid, which the child checks is still its parent. The error is the errno of the step that
/// failed (in the parent or the child).
pub(super) fn spawn(spec: &Spec, parent: u32) -> io::Result<Spawned> {
    let image = Image::new(spec)?;
    let stdin = above_stdio(File::open("/dev/null")?.into())?;
    let (stdout, stdout_child) = pipe()?;
    let (stderr, stderr_child) = pipe()?;
    let fds = [
        stdin,
        above_stdio(stdout_child)?,
        above_stdio(stderr_child)?,
    ];
    let stack = Stack::new()?;
    let mut failure = Failure { errno: 0 };
    let mut args = ChildArgs {
        image: &image,
        fds: [fds[0].as_raw_fd(), fds[1].as_raw_fd(), fds[2].as_raw_fd()],
        parent,
        failure: &mut failure,
    };
    let pid = clone_child(&stack, &mut args)?;
    drop(fds);
    // SAFETY: a plain read of a local; volatile because the child wrote it behind our back.
    let errno = unsafe { ptr::read_volatile(&failure.errno) };
    if errno != 0 {
        // The child stored why it failed and `_exit`ed; collect it.
        let _ = reap(pid);
        return Err(io::Error::from_raw_os_error(errno));
    }
    Ok(Spawned {
        pid,
        stdout: stdout.into(),
        stderr: stderr.into(),
    })
}

/// Clone the child on `stack` with all signals blocked in the calling thread; returns once the
/// child has exec'd or exited.
fn clone_child(stack: &Stack, args: &mut ChildArgs) -> io::Result<u32> {
    // SAFETY: `sigfillset`/`pthread_sigmask` write only the two local sets; the mask is restored
    // below on every path.
    let old_mask = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        old
    };
    // SAFETY: `child_main` runs on `stack` (mapped, writable, outlives the call: with
    // CLONE_VFORK this thread is suspended until the child has exec'd or exited, so `args` and
    // everything it points to stay alive and unmoved), makes only async-signal-safe calls, and
    // never returns. Without CLONE_SIGHAND its signal dispositions are its own.
    let pid = unsafe {
        libc::clone(
            child_main,
            stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            ptr::from_mut(args).cast(),
        )
    };
    let error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old_mask, ptr::null_mut());
    }
    u32::try_from(pid).map_err(|_| error)
}

/// What the child's system calls need, all of it allocated by the parent.
struct Image {
    /// The paths to try in order (one unless looked up in `PATH`), NUL-terminated.
    candidates: Vec<CString>,
    /// argv as the program gets it: the program as named, the arguments, a null.
    _argv_strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    /// argv for `/bin/sh` if the kernel cannot run the file: the shell, a slot for the path the
    /// child tried, the arguments, a null.
    script_argv: Vec<Cell<*const libc::c_char>>,
    _envp_strings: Vec<CString>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
}

impl Image {
    fn new(spec: &Spec) -> io::Result<Image> {
        let program = c_string(spec.program.as_os_str().to_owned())?;
        let env = child_environment(spec);
        let candidates = candidates(&program, env.get(OsStr::new("PATH")))?;
        let mut argv_strings = vec![program];
        for arg in &spec.args {
            argv_strings.push(c_string(arg.clone())?);
        }
        let argv = null_terminated(&argv_strings);
        let script_argv = [SHELL.as_ptr().cast(), ptr::null()]
            .iter()
            .chain(&argv[1..])
            .map(|&p| Cell::new(p))
            .collect();
        let envp_strings = env
            .into_iter()
            .map(|(mut key, value)| {
                key.push("=");
                key.push(value);
                c_string(key)
            })
            .collect::<io::Result<Vec<_>>>()?;
        let envp = null_terminated(&envp_strings);
        Ok(Image {
            candidates,
            _argv_strings: argv_strings,
            argv,
            script_argv,
            envp,
            _envp_strings: envp_strings,
            cwd: c_string(spec.cwd.as_os_str().to_owned())?,
        })
    }
}

/// This process's environment with the spec's removals, then its settings, applied.
fn child_environment(spec: &Spec) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    for key in &spec.env_remove {
        env.remove(OsStr::new(key));
    }
    for (key, value) in &spec.env_set {
        env.insert(key.into(), value.into());
    }
    env
}

/// The paths `execvp` tries for `program`: itself if it holds a `/`, else `dir/program` for every
/// entry of `path` (an empty entry is the working directory).
fn candidates(program: &CString, path: Option<&OsString>) -> io::Result<Vec<CString>> {
    let name = program.as_bytes();
    if name.is_empty() || name.contains(&b'/') {
        return Ok(vec![program.clone()]);
    }
    let path = path.map_or(DEFAULT_PATH, |p| p.as_bytes());
    path.split(|&b| b == b':')
        .map(|dir| {
            let mut full = dir.to_vec();
            if !dir.is_empty() {
                full.push(b'/');
            }
            full.extend_from_slice(name);
            c_string(OsString::from_vec(full))
        })
        .collect()
}

fn c_string(s: OsString) -> io::Result<CString> {
    CString::new(s.into_vec()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "nul byte found in provided data",
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect()
}

/// A descriptor the child can `dup2` onto 0, 1 or 2 without clobbering another of the three:
/// moved to 3 or above (close-on-exec) if it is one of them.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    Ok(rustix::io::fcntl_dupfd_cloexec(&fd, 3)?)
}

/// Where the child leaves the errno of the step that failed (0: it exec'd).
struct Failure {
    errno: i32,
}

/// The child's one argument: pointers into the parent's memory, valid while the parent waits.
struct ChildArgs<'a> {
    image: &'a Image,
    /// stdin, stdout, stderr to be.
    fds: [RawFd; 3],
    parent: u32,
    failure: &'a mut Failure,
}

/// The child: set up, exec; on failure store the errno and `_exit(127)`. Async-signal-safe only.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent passed to `clone`, alive while it waits.
    let args = unsafe { &mut *arg.cast::<ChildArgs>() };
    let errno = match child_setup(args) {
        Err(errno) => errno,
        Ok(()) => exec(args.image),
    };
    // SAFETY: the parent's memory, which the parent does not touch until this process has
    // exited; written once, volatile so it is not optimised away before `_exit`.
    unsafe { ptr::write_volatile(&mut args.failure.errno, errno.max(1)) };
    // SAFETY: `_exit` ends this process only (it is not a thread of the parent).
    unsafe { libc::_exit(127) }
}

/// Signals, process group, parent death, descriptors, working directory.
fn child_setup(args: &ChildArgs) -> Result<(), i32> {
    // SAFETY: raw system calls on this process's own state and on descriptors the parent keeps
    // open while it waits; the strings are the parent's NUL-terminated buffers.
    unsafe {
        default_signals();
        let none: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, ptr::null_mut());
    }
    rustix::process::setpgid(None, None).map_err(|e| e.raw_os_error())?;
    die_with_parent(args.parent, Signal::KILL).map_err(|e| e.raw_os_error().unwrap_or(1))?;
    for (target, &fd) in args.fds.iter().enumerate() {
        // SAFETY: `fd` is open in the parent (and so here); `target` is 0, 1 or 2.
        if unsafe { libc::dup2(fd, target as RawFd) } < 0 {
            return Err(errno());
        }
    }
    // SAFETY: `cwd` is a valid NUL-terminated string.
    if unsafe { libc::chdir(args.image.cwd.as_ptr()) } != 0 {
        return Err(errno());
    }
    Ok(())
}

/// Every caught signal and SIGPIPE back to the default disposition (a handler must not run in
/// the child, which shares the parent's memory until `execve`); ignored signals stay ignored.
///
/// # Safety
/// Only in the cloned child, with all signals blocked.
unsafe fn default_signals() {
    for sig in 1..=libc::SIGRTMAX() {
        // SAFETY: `sigaction` on this process's own dispositions, with zeroed (valid) structs;
        // a signal it refuses (SIGKILL, the C library's own) is skipped.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, ptr::null(), &mut old) != 0 {
                continue;
            }
            let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if caught || sig == libc::SIGPIPE {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, ptr::null_mut());
            }
        }
    }
}

/// `execve` each candidate as `execvp` does; returns the errno to report if none ran.
fn exec(image: &Image) -> i32 {
    let mut saw_eacces = false;
    let mut last = libc::ENOENT;
    for path in &image.candidates {
        // SAFETY: NUL-terminated strings and null-terminated pointer arrays the parent built.
        unsafe { libc::execve(path.as_ptr(), image.argv.as_ptr(), image.envp.as_ptr()) };
        last = errno();
        if last == libc::ENOEXEC {
            image.script_argv[1].set(path.as_ptr());
            // SAFETY: as above; `Cell<*const c_char>` has the layout of `*const c_char`.
            unsafe {
                libc::execve(
                    SHELL.as_ptr().cast(),
                    image.script_argv.as_ptr().cast(),
                    image.envp.as_ptr(),
                );
            }
            return errno();
        }
        match last {
            libc::EACCES => saw_eacces = true,
            libc::ENOENT | libc::ESTALE | libc::ENOTDIR | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return last,
        }
    }
    if saw_eacces {
        libc::EACCES
    } else {
        last
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(1)
}

/// The child's stack: an anonymous mapping whose lowest page is a guard.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        // SAFETY: `sysconf` only reads a system constant.
        let guard = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .map_err(|_| io::Error::last_os_error())?;
        let len = STACK_BYTES + guard;
        // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        // SAFETY: the first page of the mapping just made.
        if unsafe { libc::mprotect(base, guard, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The stack's top (it grows down), 16-byte aligned.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which `clone` takes as the initial stack
        // pointer; the length is a multiple of the page size, so it is aligned.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (the child has exec'd or exited).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

#[cfg(test)]
mod tests;
