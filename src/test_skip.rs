//! Visible skips for tests: a test this machine cannot run (its CPU lacks an instruction set)
//! calls [`skip`] and returns, instead of returning silently and passing.
//!
//! A skip is written to stderr and, when `KILN_SKIP_REPORT` names a file, appended to it:
//! `make test` empties that file first and prints and counts its lines at the end, so a run
//! that skipped anything says so in its last lines. `KILN_FORBID_SKIPS=1` turns every skip into
//! a failure (for machines that must run everything).
//!
//! Compiled into the library's tests (`crate::test_skip`) and into `tests/it` (by `#[path]`),
//! never into kiln itself.

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::Mutex;

/// The file skips are appended to (one line each), if set.
pub const REPORT_ENV: &str = "KILN_SKIP_REPORT";
/// `1`: a skip fails the test instead.
pub const FORBID_ENV: &str = "KILN_FORBID_SKIPS";

/// Reports that the calling test skips (part of) its work for `reason`; the caller then
/// returns or moves on. The line names the test (the test harness's thread name) and the
/// call site.
#[track_caller]
pub fn skip(reason: &str) {
    let at = std::panic::Location::caller();
    let thread = std::thread::current();
    let test = thread
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("(unnamed test)");
    let line = format!("{test} ({}:{}): {reason}", at.file(), at.line());
    let forbid = std::env::var(FORBID_ENV).is_ok_and(|v| v.trim() == "1");
    // A helper called in a loop (a proptest case, an ISA list) reports each skip once.
    static REPORTED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let fresh = REPORTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(line.clone());
    if fresh || forbid {
        report(&line, std::env::var_os(REPORT_ENV).as_deref(), forbid);
    }
}

/// [`skip`] once its settings are read: fail when `forbid`, else print and append to `report`.
fn report(line: &str, report: Option<&std::ffi::OsStr>, forbid: bool) {
    if forbid {
        panic!("{FORBID_ENV}=1 and this test would skip: {line}");
    }
    eprintln!("SKIPPED {line}");
    if let Some(path) = report {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("cannot open the skip report {path:?}: {e}"));
        // One write per line: appends from tests running in parallel do not interleave.
        f.write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| panic!("cannot write the skip report {path:?}: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_are_appended_to_the_report_and_can_be_forbidden() {
        let dir = std::env::temp_dir().join(format!("kiln-skip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("skips.txt");
        let _ = std::fs::remove_file(&path);
        report("a: no avx2", Some(path.as_os_str()), false);
        report("b: no neon", Some(path.as_os_str()), false);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "a: no avx2\nb: no neon\n");
        let forbidden = std::panic::catch_unwind(|| report("c", Some(path.as_os_str()), true));
        assert!(forbidden.is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
