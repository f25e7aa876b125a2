//! The PDF, DOCX and EPUB readers on any bytes: an error is fine, a panic or a hang is not.
//! The first byte picks the format; the rest is the file.
#![no_main]

use capstan_indexer::extract::{extract, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, file)) = data.split_first() else {
        return;
    };
    let format = match pick % 3 {
        0 => Format::Pdf,
        1 => Format::Docx,
        _ => Format::Epub,
    };
    let _ = extract(format, file);
});
