//! `strftime_now(format)`: the local time formatted as Python's `datetime.strftime` does on
//! Linux (glibc's directives).

use super::*;

/// `strftime_now(format)`: `datetime.now().strftime(format)`, the local
/// time formatted with strftime directives (Llama 3.x templates put today's
/// date into the system prompt).
pub(super) fn strftime_now(format: &str) -> Result<Value, Error> {
    let now = jiff::ZonedDateTime::now();
    let clock = Clock {
        year: i64::from(now.year()),
        month: now.month().unsigned_abs(),
        day: now.day().unsigned_abs(),
        hour: now.hour().unsigned_abs(),
        minute: now.minute().unsigned_abs(),
        second: now.second().unsigned_abs(),
        microsecond: now.subsec_nanosecond().unsigned_abs() / 1000,
        weekday: now.weekday().to_sunday_zero_offset().unsigned_abs(),
        day_of_year: now.day_of_year().unsigned_abs(),
        iso_year: i64::from(now.iso_week_date().year()),
        iso_week: now.iso_week_date().week().unsigned_abs(),
        epoch_seconds: now.timestamp().as_second(),
    };
    py_strftime(format, &clock).map(Value::from)
}

/// The broken-down local time that strftime formats.
pub(super) struct Clock {
    pub(super) year: i64,
    /// 1..=12
    pub(super) month: u8,
    /// 1..=31
    pub(super) day: u8,
    pub(super) hour: u8,
    pub(super) minute: u8,
    pub(super) second: u8,
    pub(super) microsecond: u32,
    /// 0 = Sunday
    pub(super) weekday: u8,
    /// 1..=366
    pub(super) day_of_year: u16,
    pub(super) iso_year: i64,
    pub(super) iso_week: u8,
    pub(super) epoch_seconds: i64,
}

pub(super) const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
pub(super) const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// `datetime.strftime` on Linux: CPython first replaces `%f` (microseconds)
/// and, for a naive datetime such as `datetime.now()`, `%z` and `%Z` with
/// nothing; glibc's `strftime` in the C locale formats the rest, with its
/// flags (`-`, `_`, `0`, `^`, `#`) and widths, and copies an unknown
/// directive through unchanged instead of failing.
pub(super) fn py_strftime(format: &str, t: &Clock) -> Result<String, Error> {
    if format.contains('\0') {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "strftime_now: embedded null character",
        ));
    }
    // CPython's pass: only the two characters right after a '%' count.
    let mut glibc_format = String::with_capacity(format.len());
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            glibc_format.push(c);
            continue;
        }
        match chars.next() {
            None => glibc_format.push('%'),
            Some('z' | 'Z') => {}
            Some('f') => {
                let _ = write!(glibc_format, "{:06}", t.microsecond);
            }
            Some(other) => {
                glibc_format.push('%');
                glibc_format.push(other);
            }
        }
    }
    let mut out = String::with_capacity(glibc_format.len() + 16);
    glibc_strftime(&mut out, &glibc_format, t);
    Ok(out)
}

/// glibc's strftime in the C locale.
pub(super) fn glibc_strftime(out: &mut String, format: &str, t: &Clock) {
    let bytes = format.as_bytes();
    let mut i = 0;
    let mut literal_start = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        out.push_str(&format[literal_start..i]);
        let start = i;
        i += 1;
        let mut pad: Option<u8> = None;
        let mut upcase = false;
        let mut swapcase = false;
        while i < bytes.len() && matches!(bytes[i], b'_' | b'-' | b'0' | b'^' | b'#') {
            match bytes[i] {
                b'^' => upcase = true,
                b'#' => swapcase = true,
                flag => pad = Some(flag),
            }
            i += 1;
        }
        let mut width: Option<usize> = None;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            let digit = usize::from(bytes[i] - b'0');
            width = Some(width.unwrap_or(0).saturating_mul(10).saturating_add(digit));
            i += 1;
        }
        // The E and O modifiers select alternative forms, which the C locale
        // does not have.
        if i < bytes.len() && matches!(bytes[i], b'E' | b'O') {
            i += 1;
        }
        let Some(&conversion) = bytes.get(i) else {
            // A '%' sequence cut off by the end of the format is copied.
            out.push_str(&format[start..]);
            literal_start = bytes.len();
            break;
        };
        i += 1;
        let spec = Spec { pad, width };
        let twelve_hour = if t.hour.is_multiple_of(12) {
            12
        } else {
            t.hour % 12
        };
        let text: String = match conversion {
            b'a' => WEEKDAYS[usize::from(t.weekday % 7)][..3].to_owned(),
            b'A' => WEEKDAYS[usize::from(t.weekday % 7)].to_owned(),
            b'b' | b'h' => MONTHS[usize::from((t.month + 11) % 12)][..3].to_owned(),
            b'B' => MONTHS[usize::from((t.month + 11) % 12)].to_owned(),
            b'p' => if t.hour < 12 { "AM" } else { "PM" }.to_owned(),
            b'P' => if t.hour < 12 { "am" } else { "pm" }.to_owned(),
            b'c' => {
                let mut s = String::new();
                glibc_strftime(&mut s, "%a %b %e %H:%M:%S %Y", t);
                s
            }
            b'D' | b'x' => sub_format("%m/%d/%y", t),
            b'F' => sub_format("%Y-%m-%d", t),
            b'r' => sub_format("%I:%M:%S %p", t),
            b'R' => sub_format("%H:%M", t),
            b'T' | b'X' => sub_format("%H:%M:%S", t),
            b'n' => "\n".to_owned(),
            b't' => "\t".to_owned(),
            b'%' => "%".to_owned(),
            b'C' => spec.number(t.year.div_euclid(100), 2, b'0'),
            b'd' => spec.number(i64::from(t.day), 2, b'0'),
            b'e' => spec.number(i64::from(t.day), 2, b' '),
            b'g' => spec.number(t.iso_year.rem_euclid(100), 2, b'0'),
            b'G' => spec.number(t.iso_year, 1, b'0'),
            b'H' => spec.number(i64::from(t.hour), 2, b'0'),
            b'I' => spec.number(i64::from(twelve_hour), 2, b'0'),
            b'j' => spec.number(i64::from(t.day_of_year), 3, b'0'),
            b'k' => spec.number(i64::from(t.hour), 2, b' '),
            b'l' => spec.number(i64::from(twelve_hour), 2, b' '),
            b'm' => spec.number(i64::from(t.month), 2, b'0'),
            b'M' => spec.number(i64::from(t.minute), 2, b'0'),
            b's' => spec.number(t.epoch_seconds, 1, b'0'),
            b'S' => spec.number(i64::from(t.second), 2, b'0'),
            b'u' => spec.number(
                i64::from(if t.weekday == 0 { 7 } else { t.weekday }),
                1,
                b'0',
            ),
            b'U' => {
                let yday = i64::from(t.day_of_year) - 1;
                spec.number((yday + 7 - i64::from(t.weekday)) / 7, 2, b'0')
            }
            b'V' => spec.number(i64::from(t.iso_week), 2, b'0'),
            b'w' => spec.number(i64::from(t.weekday), 1, b'0'),
            b'W' => {
                let yday = i64::from(t.day_of_year) - 1;
                let monday_based = (i64::from(t.weekday) + 6) % 7;
                spec.number((yday + 7 - monday_based) / 7, 2, b'0')
            }
            b'y' => spec.number(t.year.rem_euclid(100), 2, b'0'),
            b'Y' => spec.number(t.year, 1, b'0'),
            // A naive datetime has no zone: glibc prints nothing for them.
            b'z' | b'Z' => String::new(),
            _ => {
                // Unknown directive (or a multi-byte character): copied
                // through as written, like glibc does.
                let end = (start + 1..=format.len())
                    .find(|&e| e >= i && format.is_char_boundary(e))
                    .unwrap_or(format.len());
                out.push_str(&format[start..end]);
                i = end;
                literal_start = end;
                continue;
            }
        };
        let text = if upcase || (swapcase && matches!(conversion, b'a' | b'A' | b'b' | b'B' | b'h'))
        {
            text.to_uppercase()
        } else if swapcase && conversion == b'p' {
            text.to_lowercase()
        } else {
            text
        };
        // A width pads any conversion on the left (numbers were already
        // padded to it): spaces, or zeros with the '0' flag.
        let fill = if pad == Some(b'0') { '0' } else { ' ' };
        match width {
            Some(w) if text.chars().count() < w => {
                out.extend(std::iter::repeat_n(fill, w - text.chars().count()));
            }
            _ => {}
        }
        out.push_str(&text);
        literal_start = i;
    }
    out.push_str(&format[literal_start.min(format.len())..]);
}

/// Formats a composite directive (`%D`, `%T`, ...) from its definition.
pub(super) fn sub_format(format: &str, t: &Clock) -> String {
    let mut s = String::new();
    glibc_strftime(&mut s, format, t);
    s
}

/// The flag and width of one strftime directive.
pub(super) struct Spec {
    pad: Option<u8>,
    width: Option<usize>,
}

impl Spec {
    /// A number padded as glibc pads it: to `width` (default `digits`) with
    /// the directive's own fill (`default_pad`), spaces with `_`, zeros with
    /// `0`; `-` drops the default padding but an explicit width still pads
    /// with spaces.
    fn number(&self, n: i64, digits: usize, default_pad: u8) -> String {
        let fill = match self.pad {
            Some(b'-') if self.width.is_none() => return n.to_string(),
            Some(b'-' | b'_') => ' ',
            Some(b'0') => '0',
            _ => char::from(default_pad),
        };
        let width = self.width.unwrap_or(digits);
        let body = n.unsigned_abs().to_string();
        let sign = if n < 0 { "-" } else { "" };
        let len = body.len() + sign.len();
        if len >= width {
            return format!("{sign}{body}");
        }
        let padding: String = std::iter::repeat_n(fill, width - len).collect();
        if fill == '0' {
            format!("{sign}{padding}{body}")
        } else {
            format!("{padding}{sign}{body}")
        }
    }
}
