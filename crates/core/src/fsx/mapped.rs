//! A regular file mapped read-only for as long as a [`Mapped`] lives, safe against the file being
//! truncated meanwhile.
//!
//! Reading a mapping beyond the end of a file that shrank after it was mapped raises SIGBUS,
//! which by default ends the process — in a long-lived daemon, every client's compile with it.
//! Here a SIGBUS handler (installed once, chaining to whatever handler was there before) looks
//! the faulting address up in a table of the live mappings; when it falls in one, it maps
//! zero-filled anonymous memory over the rest of that mapping (one `mmap` system call, which is
//! safe in a signal handler), marks the mapping as truncated, and returns: the reader carries on
//! over zeros and [`Mapped::truncated`] tells afterwards that what it read is not the file. A
//! SIGBUS anywhere else goes to the previous handler (or ends the process as it would have).
//!
//! At most [`SLOTS`] mappings live at once; [`Mapped::new`] answers `None` when the table is full
//! (the caller reads the file instead), as it does for an empty file or one that cannot be
//! mapped.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// How many mappings can live at once.
pub const SLOTS: usize = 64;

/// One live mapping: its address range (0, 0 when free) and whether a SIGBUS was absorbed in it.
struct Slot {
    start: AtomicUsize,
    end: AtomicUsize,
    truncated: AtomicBool,
    taken: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    truncated: AtomicBool::new(false),
    taken: AtomicBool::new(false),
};
static TABLE: [Slot; SLOTS] = [FREE; SLOTS];
static INSTALL: Once = Once::new();
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The SIGBUS action that was in place before ours (written once, before ours is installed).
static mut PREVIOUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for slot in &TABLE {
        let (start, end) = (
            slot.start.load(Ordering::SeqCst),
            slot.end.load(Ordering::SeqCst),
        );
        if start != 0 && addr >= start && addr < end {
            let page = addr & !(page_size() - 1);
            // SAFETY: replaces pages of a mapping this module made and still owns with private
            // zero pages of the same protection; a raw system call, async-signal-safe.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_mmap,
                    page,
                    end - page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1i64,
                    0i64,
                )
            };
            if r as usize == page {
                slot.truncated.store(true, Ordering::SeqCst);
                return;
            }
            break;
        }
    }
    // Not ours (or the remap failed): what would have happened without this module.
    // SAFETY: PREVIOUS was written before this handler was installed and is never written again.
    let prev = unsafe { (*std::ptr::addr_of!(PREVIOUS)).assume_init_ref() };
    if prev.sa_flags & libc::SA_SIGINFO != 0
        && prev.sa_sigaction != libc::SIG_DFL
        && prev.sa_sigaction != libc::SIG_IGN
    {
        // SAFETY: the previous handler was installed as an SA_SIGINFO handler with this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig, info, ctx);
    } else if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN {
        // SAFETY: as above, a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig);
    } else {
        // Restore the default action and return: the faulting access repeats and the process
        // ends with SIGBUS, as it would have without this module.
        // SAFETY: sigaction is async-signal-safe; a zeroed action with SIG_DFL is valid.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
        }
    }
}

/// The page size, read once when the handler is installed (the handler only loads it).
static PAGE: AtomicUsize = AtomicUsize::new(4096);

fn page_size() -> usize {
    PAGE.load(Ordering::Relaxed)
}

fn install() -> bool {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: PREVIOUS is written here, once, before the handler that reads it exists; the
        // action is a valid SA_SIGINFO handler.
        unsafe {
            let prev = &mut *std::ptr::addr_of_mut!(PREVIOUS);
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), prev.as_mut_ptr()) != 0 {
                return;
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as libc::sighandler_t;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) == 0 {
                INSTALLED.store(true, Ordering::SeqCst);
            }
        }
    });
    INSTALLED.load(Ordering::SeqCst)
}

/// A read-only mapping of a whole regular file.
pub struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
    slot: &'static Slot,
}

// SAFETY: the mapping is read-only memory owned by this value; sharing a `&[u8]` of it between
// threads is as safe as sharing any other immutable slice.
unsafe impl Send for Mapped {}
// SAFETY: see above.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Map `file`, whose length is `len` (as the caller read it from the open file). `None` when
    /// it cannot be mapped safely: an empty file, no free slot, the handler could not be
    /// installed, or `mmap` refused (the caller then reads the file).
    pub fn new(file: &File, len: u64) -> Option<Mapped> {
        let len = usize::try_from(len).ok().filter(|&l| l > 0)?;
        if !install() {
            return None;
        }
        let slot = TABLE.iter().find(|s| {
            s.taken
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        })?;
        // SAFETY: a fresh shared read-only mapping of a file descriptor we hold; nothing else
        // aliases it mutably.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            slot.taken.store(false, Ordering::SeqCst);
            return None;
        }
        slot.truncated.store(false, Ordering::SeqCst);
        // The end first, then the start that makes the slot live for the handler.
        slot.end.store(ptr as usize + len, Ordering::SeqCst);
        slot.start.store(ptr as usize, Ordering::SeqCst);
        Some(Mapped { ptr, len, slot })
    }

    /// The file's bytes as they were mapped (zeros past where it shrank, if it did).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes for as long as `self` lives; pages past a
        // truncation are replaced by zero pages by the handler, never left unmapped.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }

    /// Whether the file shrank while mapped and a read past its new end was absorbed (what was
    /// read is then not the file).
    pub fn truncated(&self) -> bool {
        self.slot.truncated.load(Ordering::SeqCst)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `new` mapped; no slice of it outlives `self`.
        unsafe {
            libc::munmap(self.ptr, self.len);
        }
        self.slot.start.store(0, Ordering::SeqCst);
        self.slot.end.store(0, Ordering::SeqCst);
        self.slot.taken.store(false, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_mapping_reads_the_file() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        f.write_all(&data).unwrap();
        let m = Mapped::new(&f, data.len() as u64).unwrap();
        assert_eq!(m.bytes(), &data[..]);
        assert!(!m.truncated());
    }

    #[test]
    fn an_empty_file_is_not_mapped() {
        let f = tempfile::tempfile().unwrap();
        assert!(Mapped::new(&f, 0).is_none());
    }

    #[test]
    fn a_file_truncated_while_mapped_reads_as_zeros_and_says_so() {
        let page = 4096 * 4;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![0xa5u8; 8 * page]).unwrap();
        let m = Mapped::new(&f, 8 * page as u64).unwrap();
        assert_eq!(m.bytes()[0], 0xa5);
        f.set_len(2 * page as u64).unwrap();
        // Without the handler, this read ends the test process with SIGBUS.
        let tail: u64 = m.bytes()[3 * page..].iter().map(|&b| b as u64).sum();
        assert_eq!(tail, 0);
        assert!(m.truncated());
        assert_eq!(
            m.bytes()[page],
            0xa5,
            "what is still in the file reads as before"
        );
    }

    #[test]
    fn slots_are_given_back() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"x").unwrap();
        for _ in 0..(3 * SLOTS) {
            let m = Mapped::new(&f, 1).expect("a free slot");
            assert_eq!(m.bytes(), b"x");
        }
    }
}
