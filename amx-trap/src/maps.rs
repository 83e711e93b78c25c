//! `/proc/self/maps`, read without allocating (from a signal handler): whether the engine may
//! write into the code of the mapping at an address.

/// `/proc/self/maps`, kept open.
pub(crate) static MAPS: crate::sys::OwnFile =
    crate::sys::OwnFile::new(c"/proc/self/maps", libc::O_RDONLY | libc::O_CLOEXEC);

/// Whether the code of the mapping holding `addr` may be patched: a private mapping (`p`; a
/// write into a shared one would reach the file, or the other processes mapping it), not
/// writable (a program that writes its code in place, without a system call the engine sees,
/// could write into the jump, or lose its write to the engine's), and not the main thread's
/// stack (a stub page placed within reach would stop its growth). `None` when the file cannot
/// be read or holds no mapping at `addr`.
pub(crate) fn patchable(addr: u64) -> Option<bool> {
    let file = MAPS.get()?;
    let fd = file.fd();
    // From the start, whatever the kept descriptor's offset (threads may read it at once).
    let mut at = 0u64;
    let mut found = None;
    let mut buf = [0u8; 4096];
    // A line longer than the buffer's rest is carried over to its start.
    let mut kept = 0;
    'read: while let Some(free) = buf.get_mut(kept..) {
        let Ok(n) = crate::sys::pread(fd, free, at).map(|n| n as usize) else {
            break;
        };
        at += n as u64;
        if n == 0 {
            break;
        }
        let filled = kept.saturating_add(n).min(buf.len());
        let mut line_start = 0;
        while let Some(rest) = buf.get(line_start..filled) {
            let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
                break;
            };
            if let Some(p) = rest.get(..nl).and_then(|line| covers(line, addr)) {
                found = Some(p);
                break 'read;
            }
            line_start += nl + 1;
        }
        kept = filled.saturating_sub(line_start);
        if kept > 0 {
            buf.copy_within(line_start..filled, 0);
        }
        if kept == buf.len() {
            // A line of more than 4 KiB: only a path can be that long; skip it.
            kept = 0;
        }
    }
    found
}

/// For a line `start-end perms offset dev inode path` whose range holds `addr`: whether its
/// code may be patched ([`patchable`]).
fn covers(line: &[u8], addr: u64) -> Option<bool> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let perms = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(range.get(..dash)?)?;
    let end = hex(range.get(dash + 1..)?)?;
    if !(start..end).contains(&addr) {
        return None;
    }
    let path = fields.nth(3);
    Some(perms.get(3) == Some(&b'p') && perms.get(1) != Some(&b'w') && path != Some(b"[stack]"))
}

fn hex(digits: &[u8]) -> Option<u64> {
    let mut v: u64 = 0;
    for &d in digits {
        let x = char::from(d).to_digit(16)?;
        v = v.checked_mul(16)?.checked_add(u64::from(x))?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_read_as_the_kernel_writes_them() {
        let line = b"7f12a000-7f12c000 r-xp 00000000 fd:01 1234   /usr/lib/libc.so.6";
        assert_eq!(covers(line, 0x7f12a000), Some(true));
        assert_eq!(covers(line, 0x7f12bfff), Some(true));
        assert_eq!(covers(line, 0x7f12c000), None);
        let shared = b"7f000000-7f001000 r-xs 00000000 00:01 99 /memfd:jit (deleted)";
        assert_eq!(covers(shared, 0x7f000010), Some(false));
        let writable = b"7f000000-7f001000 rwxp 00000000 00:00 0 ";
        assert_eq!(covers(writable, 0x7f000010), Some(false));
        let stack = b"7ffc0000-7ffc2000 rwxp 00000000 00:00 0                          [stack]";
        assert_eq!(covers(stack, 0x7ffc0010), Some(false));
        let stack_rx = b"7ffc0000-7ffc2000 r-xp 00000000 00:00 0                          [stack]";
        assert_eq!(covers(stack_rx, 0x7ffc0010), Some(false));
        let anonymous = b"7f000000-7f001000 r-xp 00000000 00:00 0";
        assert_eq!(covers(anonymous, 0x7f000010), Some(true));
        assert_eq!(covers(b"garbage", 1), None);
    }

    #[test]
    fn this_process_code_is_patchable_and_shared_or_writable_memory_is_not() {
        let code = lines_are_read_as_the_kernel_writes_them as *const () as u64;
        assert_eq!(patchable(code), Some(true));
        let local = 0u8;
        assert_eq!(patchable(&local as *const u8 as u64), Some(false));
        // SAFETY: a shared anonymous page, unmapped below.
        let shared = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(shared, libc::MAP_FAILED);
        assert_eq!(patchable(shared as u64), Some(false));
        // SAFETY: the page mapped above.
        unsafe { libc::munmap(shared, 4096) };
        assert_eq!(patchable(8), None);
    }
}
