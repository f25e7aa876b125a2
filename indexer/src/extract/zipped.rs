//! Reading members of the zip containers DOCX and EPUB are, with a bound
//! on what a member may inflate to (a zip bomb inflates a few kilobytes
//! into gigabytes).

use std::io::{Cursor, Read};

use super::{ExtractError, Format};

/// The most one member may inflate to: far more than the text of any book.
const MAX_MEMBER_BYTES: u64 = 256 << 20;

pub(crate) struct Zipped<'a> {
    format: Format,
    archive: zip::ZipArchive<Cursor<&'a [u8]>>,
}

impl<'a> Zipped<'a> {
    pub fn open(format: Format, bytes: &'a [u8]) -> Result<Self, ExtractError> {
        let archive = zip::ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| ExtractError::unreadable(format, format!("not a zip container: {e}")))?;
        Ok(Self { format, archive })
    }

    /// Whether the container holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.archive.index_for_name(name).is_some()
    }

    /// The member `name` as text (UTF-8, a BOM dropped).
    pub fn text(&mut self, name: &str) -> Result<String, ExtractError> {
        let format = self.format;
        let mut member = self.archive.by_name(name).map_err(|e| match e {
            zip::result::ZipError::UnsupportedArchive(m) if m.contains("assword") => {
                ExtractError::Encrypted {
                    format: format.name().into(),
                }
            }
            e => ExtractError::unreadable(format, format!("{name}: {e}")),
        })?;
        if member.encrypted() {
            return Err(ExtractError::Encrypted {
                format: format.name().into(),
            });
        }
        let mut bytes = Vec::new();
        (&mut member)
            .take(MAX_MEMBER_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| ExtractError::unreadable(format, format!("{name}: {e}")))?;
        if bytes.len() as u64 > MAX_MEMBER_BYTES {
            return Err(ExtractError::unreadable(
                format,
                format!(
                    "{name} inflates to more than {} MiB",
                    MAX_MEMBER_BYTES >> 20
                ),
            ));
        }
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
        String::from_utf8(bytes.to_vec())
            .map_err(|_| ExtractError::unreadable(format, format!("{name} is not UTF-8")))
    }
}
