//! `[gpu_types.<type>]`: each GPU type's rate, and the types that are slices of another's GPU
//! (docs/design/fractional-gpus.md).

use std::collections::BTreeMap;

use crate::config::{GpuType, Slice, DEFAULT_GPU_TYPE, SHARE_TYPE};
use crate::suggest::closest;

use super::is_gres_type;
use super::reader::{Checker, Field, Section};

const GPU_TYPE_KEYS: &[&str] = &["rate_per_hour", "slices_of", "gpus"];

/// The largest denominator a slice's size may have: MIG cuts a GPU in 7 or 8, shares of a
/// GPU go further, and a decimal is read as the nearest fraction up to this.
const MAX_DENOMINATOR: u32 = 128;

/// How far a decimal size may be from the fraction it is read as.
const DECIMAL_TOLERANCE: f64 = 1e-4;

/// A slice as written, before its GPU's type is checked.
struct Written {
    of: String,
    of_span: Option<super::Span>,
    numerator: u32,
    denominator: u32,
}

impl Checker<'_> {
    pub(super) fn gpu_types(&mut self, top: &Section<'_>) -> BTreeMap<String, GpuType> {
        let mut gpu_types = BTreeMap::new();
        let Some(field) = top.field("gpu_types") else {
            return gpu_types;
        };
        let Some(section) = self.table(
            &field,
            "[gpu_types]".into(),
            "write one [gpu_types.<type>] section per GPU type, with its rate_per_hour",
        ) else {
            return gpu_types;
        };
        let mut slices: BTreeMap<String, Written> = BTreeMap::new();
        for field in section.fields() {
            let name = field.name().to_owned();
            if !is_gres_type(&name) {
                self.error(
                    field.key_span(),
                    format!("GPU type \"{name}\" is not a gres type Slurm accepts"),
                    "use the Type= of gres.conf: letters, digits, `_`, `-` and `.`; \"default\" for untyped GPUs",
                );
            }
            let (rate, slice) = self.gpu_type(&field, &name);
            if let Some(slice) = slice {
                slices.insert(name.clone(), slice);
            }
            // Declared even when its rate is wrong: quotas naming it are not "not offered".
            gpu_types.insert(
                name,
                GpuType {
                    rate_per_hour: rate.unwrap_or(f64::NAN),
                    slice: None,
                },
            );
        }
        self.resolve_slices(&mut gpu_types, slices);
        for t in gpu_types.values_mut() {
            if t.rate_per_hour.is_nan() {
                t.rate_per_hour = 0.0;
            }
        }
        gpu_types
    }

    /// One `[gpu_types.<name>]`: its rate (`None` when absent or invalid) and what it says of
    /// being a slice.
    fn gpu_type(&mut self, field: &Field<'_>, name: &str) -> (Option<f64>, Option<Written>) {
        let title = format!("[gpu_types.{name}]");
        let hint = format!("write {title} and below it rate_per_hour = 2.5");
        let Some(mut section) = self.table(field, title, &hint) else {
            return (None, None);
        };
        self.unknown_keys(&mut section, GPU_TYPE_KEYS);
        let slice = self.slice(&section, name);
        if name == SHARE_TYPE {
            return (None, self.share(&section, field.key_span(), slice));
        }
        // A slice costs its part of its GPU's rate unless it has its own (and one written
        // wrong is reported as such, not as a whole GPU without a rate).
        let says_slice = section.field("slices_of").is_some() || section.field("gpus").is_some();
        let rate_field = match (section.field("rate_per_hour"), says_slice) {
            (Some(f), _) => f,
            (None, true) => return (None, slice),
            (None, false) => {
                self.required(
                    &section,
                    "rate_per_hour",
                    "give the cost of one GPU for one hour, e.g. rate_per_hour = 2.5",
                );
                return (None, None);
            }
        };
        let Some(rate) = self.number(&rate_field, "2.5") else {
            return (None, slice);
        };
        if rate < 0.0 {
            self.error(
                rate_field.span(),
                format!("negative rate {rate} for {}", rate_field.what()),
                "a rate is the cost of one GPU-hour: use 0 or more",
            );
            return (None, slice);
        }
        (Some(rate), slice)
    }

    /// `[gpu_types.shard]`: Slurm's `gres/shard`, a share of one GPU of its `slices_of` type,
    /// `gpus = "1/N"` for N shards per GPU. It has no rate of its own (a shard costs its part
    /// of its GPU: Slurm counts the GPU's time, not the shard's use of it).
    fn share(
        &mut self,
        section: &Section<'_>,
        at: Option<super::Span>,
        slice: Option<Written>,
    ) -> Option<Written> {
        const HINT: &str = "write [gpu_types.shard] with slices_of = \"a100\" (the GPUs shared) and gpus = \"1/4\" (4 shards per GPU, as gres.conf's Count)";
        if let Some(f) = section.field("rate_per_hour") {
            self.error(
                f.span(),
                "a shard has no rate of its own: it costs its part of its GPU's rate".to_owned(),
                HINT,
            );
        }
        let has_keys = section.field("slices_of").is_some() || section.field("gpus").is_some();
        match slice {
            Some(w) if w.numerator == 1 => Some(w),
            Some(w) => {
                self.error(
                    section.field("gpus").and_then(|f| f.span()),
                    format!(
                        "a shard is one of the equal shares of a GPU: gpus = \"1/N\", not {}/{}",
                        w.numerator, w.denominator
                    ),
                    HINT,
                );
                None
            }
            None if has_keys => None,
            None => {
                self.error(
                    at,
                    "[gpu_types.shard] stands for Slurm's gres/shard: it needs the GPU type it shares and its size".to_owned(),
                    HINT,
                );
                None
            }
        }
    }

    /// `slices_of` and `gpus`, which go together; `None` when neither is given or either is
    /// invalid (reported).
    fn slice(&mut self, section: &Section<'_>, name: &str) -> Option<Written> {
        let of = section.field("slices_of");
        let size = section.field("gpus");
        let example = format!(
            "a MIG profile of an A100: [gpu_types.\"{name}\"] slices_of = \"a100\" and gpus = \"1/7\""
        );
        match (&of, &size) {
            (None, None) => return None,
            (Some(f), None) => {
                self.error(
                    f.span(),
                    format!("{} needs `gpus`, the slice's size", f.what()),
                    example,
                );
                return None;
            }
            (None, Some(f)) => {
                self.error(
                    f.span(),
                    format!(
                        "{} needs `slices_of`, the type of the GPU it is a part of",
                        f.what()
                    ),
                    example,
                );
                return None;
            }
            (Some(_), Some(_)) => {}
        }
        let (of, size) = (of?, size?);
        let parent = self.non_empty_string(&of, "\"a100\"");
        let fraction = self.fraction(&size);
        Some(Written {
            of: parent?.to_owned(),
            of_span: of.span(),
            numerator: fraction?.0,
            denominator: fraction?.1,
        })
    }

    /// A slice's size: `"n/d"` or a decimal read as the nearest fraction (denominator up to
    /// [`MAX_DENOMINATOR`]), above 0 and at most 1, in lowest terms.
    fn fraction(&mut self, field: &Field<'_>) -> Option<(u32, u32)> {
        const EXAMPLE: &str = "\"1/7\" or 0.5";
        let parsed = if let Some(text) = field.item.as_str() {
            parse_fraction(text)
        } else if let Some(v) = field
            .item
            .as_float()
            .or(field.item.as_integer().map(|i| i as f64))
        {
            nearest_fraction(v)
        } else {
            self.wrong_type(field, "a fraction \"n/d\" or a number", EXAMPLE);
            return None;
        };
        match parsed {
            Ok((n, d)) if n > 0 && n <= d => Some((n, d)),
            Ok(_) => {
                self.error(
                    field.span(),
                    format!("{} must be above 0 and at most 1 GPU", field.what()),
                    format!("a slice is a part of one GPU: for example gpus = {EXAMPLE}"),
                );
                None
            }
            Err(problem) => {
                self.error(
                    field.span(),
                    format!("{} {problem}", field.what()),
                    format!("for example: gpus = {EXAMPLE}"),
                );
                None
            }
        }
    }

    /// Each slice's GPU type must be declared and whole; a slice without a rate costs its
    /// part of that type's rate.
    fn resolve_slices(
        &mut self,
        gpu_types: &mut BTreeMap<String, GpuType>,
        slices: BTreeMap<String, Written>,
    ) {
        let wholes: Vec<String> = gpu_types
            .keys()
            .filter(|t| !slices.contains_key(*t) && t.as_str() != DEFAULT_GPU_TYPE)
            .cloned()
            .collect();
        for (name, w) in slices {
            let problem = if w.of == name {
                Some(format!("GPU type `{name}` cannot be a slice of itself"))
            } else if w.of == DEFAULT_GPU_TYPE {
                Some(
                    "`default` prices GPUs without a type: a slice is cut from a typed GPU"
                        .to_owned(),
                )
            } else if slices_contains(&w.of, gpu_types, &wholes) {
                Some(format!(
                    "`{}` is itself a slice: name the whole GPU it is cut from",
                    w.of
                ))
            } else if !gpu_types.contains_key(&w.of) {
                Some(format!(
                    "GPU type `{}` is not declared in [gpu_types]",
                    w.of
                ))
            } else {
                None
            };
            if let Some(problem) = problem {
                let names: Vec<&str> = wholes.iter().map(String::as_str).collect();
                let hint = match closest(&w.of, &names) {
                    Some(s) if s != w.of => {
                        format!("did you mean `{s}`? whole GPU types: {}", names.join(", "))
                    }
                    _ if names.is_empty() => {
                        "declare the whole GPU's type with its rate_per_hour first".to_owned()
                    }
                    _ => format!("whole GPU types: {}", names.join(", ")),
                };
                self.error(
                    w.of_span.clone(),
                    format!("`slices_of` of [gpu_types.{name}]: {problem}"),
                    hint,
                );
                continue;
            }
            let parent_rate = gpu_types[&w.of].rate_per_hour;
            let slice = Slice {
                of: w.of,
                numerator: w.numerator,
                denominator: w.denominator,
            };
            if let Some(t) = gpu_types.get_mut(&name) {
                if t.rate_per_hour.is_nan() && !parent_rate.is_nan() {
                    t.rate_per_hour = parent_rate * slice.gpus();
                }
                t.slice = Some(slice);
            }
        }
    }
}

/// Whether `name` is a declared type that is not whole (so, a slice).
fn slices_contains(name: &str, gpu_types: &BTreeMap<String, GpuType>, wholes: &[String]) -> bool {
    gpu_types.contains_key(name) && name != DEFAULT_GPU_TYPE && !wholes.iter().any(|w| w == name)
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `"3/7"` (blanks allowed around the numbers) or `"0.5"`, in lowest terms.
fn parse_fraction(text: &str) -> Result<(u32, u32), String> {
    let Some((n, d)) = text.split_once('/') else {
        let v: f64 = text
            .trim()
            .parse()
            .map_err(|_| format!("must be a fraction \"n/d\" or a number, not \"{text}\""))?;
        return nearest_fraction(v);
    };
    let read = |s: &str| s.trim().parse::<u32>().ok();
    match (read(n), read(d)) {
        (Some(n), Some(d)) if d > 0 && d <= MAX_DENOMINATOR => {
            let g = gcd(n, d).max(1);
            Ok((n / g, d / g))
        }
        (Some(_), Some(_)) => Err(format!(
            "\"{text}\" needs a denominator from 1 to {MAX_DENOMINATOR}"
        )),
        _ => Err(format!(
            "\"{text}\" is not a fraction of whole numbers \"n/d\""
        )),
    }
}

/// The fraction with the smallest denominator (up to [`MAX_DENOMINATOR`]) within
/// [`DECIMAL_TOLERANCE`] of `v`: 0.142857 is 1/7, 0.5 is 1/2.
fn nearest_fraction(v: f64) -> Result<(u32, u32), String> {
    if !v.is_finite() || !(0.0..=1.0).contains(&v) {
        return Err(format!("must be above 0 and at most 1 GPU (got {v})"));
    }
    for d in 1..=MAX_DENOMINATOR {
        let n = (v * f64::from(d)).round();
        if (n / f64::from(d) - v).abs() <= DECIMAL_TOLERANCE {
            // n <= d since v <= 1.
            let n = n as u32;
            let g = gcd(n, d).max(1);
            return Ok((n / g, d / g));
        }
    }
    Err(format!(
        "{v} is no fraction with a denominator up to {MAX_DENOMINATOR}: write it as \"n/d\""
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_fractions() {
        assert_eq!(parse_fraction("1/7"), Ok((1, 7)));
        assert_eq!(parse_fraction(" 2 / 14 "), Ok((1, 7)));
        assert_eq!(parse_fraction("0.5"), Ok((1, 2)));
        assert_eq!(nearest_fraction(0.142857), Ok((1, 7)));
        assert_eq!(nearest_fraction(3.0 / 7.0), Ok((3, 7)));
        assert_eq!(nearest_fraction(1.0), Ok((1, 1)));
        assert!(nearest_fraction(0.333).is_err());
        assert!(nearest_fraction(f64::NAN).is_err());
        assert!(nearest_fraction(1.5).is_err());
        assert!(parse_fraction("1/0").is_err());
        assert!(parse_fraction("1/200").is_err());
        assert!(parse_fraction("a/7").is_err());
        assert!(parse_fraction("-1/7").is_err());
    }
}
