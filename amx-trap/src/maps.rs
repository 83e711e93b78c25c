//! `/proc/self/maps`, read without allocating (from a signal handler): whether the mapping at
//! an address is private.

/// Whether the mapping holding `addr` is private (`p`) rather than shared (`s`); `None` when
/// the file cannot be read or holds no mapping at `addr`.
pub(crate) fn private(addr: u64) -> Option<bool> {
    let fd = crate::sys::open(c"/proc/self/maps", libc::O_RDONLY | libc::O_CLOEXEC).ok()?;
    let mut found = None;
    let mut buf = [0u8; 4096];
    // A line longer than the buffer's rest is carried over to its start.
    let mut kept = 0;
    'read: while let Some(free) = buf.get_mut(kept..) {
        let Ok(n) = crate::sys::read(fd, free).map(|n| n as usize) else {
            break;
        };
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
    crate::sys::close(fd);
    found
}

/// For a line `start-end perms ...` whose range holds `addr`: whether its perms say private.
fn covers(line: &[u8], addr: u64) -> Option<bool> {
    let mut fields = line.split(|&b| b == b' ');
    let range = fields.next()?;
    let perms = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(range.get(..dash)?)?;
    let end = hex(range.get(dash + 1..)?)?;
    if !(start..end).contains(&addr) {
        return None;
    }
    Some(perms.get(3) == Some(&b'p'))
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
        let shared = b"7f000000-7f001000 rwxs 00000000 00:01 99 /memfd:jit (deleted)";
        assert_eq!(covers(shared, 0x7f000010), Some(false));
        assert_eq!(covers(b"garbage", 1), None);
    }

    #[test]
    fn this_process_code_is_private() {
        let code = lines_are_read_as_the_kernel_writes_them as *const () as u64;
        assert_eq!(private(code), Some(true));
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
        assert_eq!(private(shared as u64), Some(false));
        // SAFETY: the page mapped above.
        unsafe { libc::munmap(shared, 4096) };
        assert_eq!(private(8), None);
    }
}
