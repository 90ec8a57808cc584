//! `Glob::new` and `Glob::matches` on an arbitrary pattern and paths.
#![no_main]

use agentvfs_front::properties::check_glob;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (&str, Vec<&str>)| {
    let (pattern, paths) = input;
    check_glob(pattern, &paths);
});
