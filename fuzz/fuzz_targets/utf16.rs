//! UTF-16 offset conversion and slicing on arbitrary text.
#![no_main]

use agentvfs_front::properties::{check_slice, check_utf16_offsets};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u16, u8, u8, &str)| {
    let (units, max_lines, max_chars, text) = input;
    check_utf16_offsets(text, units.into());
    check_slice(text, max_lines.into(), max_chars.into());
});
