//! Raw bytes decoded as every request message.
#![no_main]

use agentvfs_front::properties::check_request_decode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    check_request_decode(bytes);
});
