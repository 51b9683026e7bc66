//! NumPy `.npy` files: reading the header (format versions 1, 2 and 3) and the raw data, and
//! writing an array back (version 1 when the header fits, else 2). Only what StaticIOTranspose
//! needs: elements are moved as opaque `itemsize`-byte units, so any fixed-size dtype works.

use std::fmt;

const MAGIC: &[u8] = b"\x93NUMPY";

/// A parsed array: dtype descriptor, shape, memory order and the data bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Array {
    /// The `descr` string, e.g. `<f4`.
    pub descr: String,
    /// The data is in Fortran (column-major) order rather than C order.
    pub fortran_order: bool,
    /// The dimensions, outermost first (empty for a scalar).
    pub shape: Vec<usize>,
    /// Bytes per element, from the `descr`.
    pub itemsize: usize,
    /// The element bytes as the file holds them: `itemsize` × the product of `shape`.
    pub data: Vec<u8>,
}

/// Why a file is not a usable `.npy` array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyError(pub String);

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(m: impl Into<String>) -> Result<T, NpyError> {
    Err(NpyError(m.into()))
}

/// The size in bytes of one element of a simple dtype descriptor (`<f4`, `|u1`, `<U10`, `|S3`).
pub(crate) fn itemsize(descr: &str) -> Option<usize> {
    let d = descr.trim_start_matches(['<', '>', '|', '=']);
    let kind = d.chars().next()?;
    let n: usize = d[kind.len_utf8()..].parse().ok()?;
    match kind {
        'b' | 'i' | 'u' | 'f' | 'c' | 'S' | 'V' | 'm' | 'M' => Some(n),
        'U' => n.checked_mul(4),
        '?' => Some(1),
        _ => None,
    }
}

fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let k1 = format!("'{key}'");
    let start = header.find(&k1)? + k1.len();
    let rest = header[start..].trim_start().strip_prefix(':')?.trim_start();
    Some(rest)
}

/// Parse a `.npy` file.
pub fn parse(bytes: &[u8]) -> Result<Array, NpyError> {
    if bytes.len() < 10 || !bytes.starts_with(MAGIC) {
        return err("not a .npy file (bad magic)");
    }
    let major = bytes[6];
    let (hlen, hstart) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10usize),
        2 | 3 => {
            if bytes.len() < 12 {
                return err("truncated .npy header");
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return err(format!("unsupported .npy format version {v}")),
    };
    let hend = hstart
        .checked_add(hlen)
        .filter(|e| *e <= bytes.len())
        .ok_or_else(|| NpyError("truncated .npy header".into()))?;
    let header = std::str::from_utf8(&bytes[hstart..hend])
        .map_err(|_| NpyError("the .npy header is not text".into()))?;
    let descr_v = dict_value(header, "descr")
        .ok_or_else(|| NpyError("the .npy header has no descr".into()))?;
    let Some(descr) = descr_v
        .strip_prefix('\'')
        .and_then(|r| r.split('\'').next())
    else {
        return err("unsupported dtype (structured or non-string descr)");
    };
    let itemsize = itemsize(descr).ok_or_else(|| NpyError(format!("unsupported dtype {descr}")))?;
    let fortran_order = dict_value(header, "fortran_order").is_some_and(|v| v.starts_with("True"));
    let shape_v = dict_value(header, "shape")
        .ok_or_else(|| NpyError("the .npy header has no shape".into()))?;
    let inner = shape_v
        .strip_prefix('(')
        .and_then(|r| r.split(')').next())
        .ok_or_else(|| NpyError("bad shape".into()))?;
    let mut shape = Vec::new();
    for part in inner.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        shape.push(
            part.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| NpyError(format!("bad shape dimension {part:?}")))?,
        );
    }
    let count = shape
        .iter()
        .try_fold(1usize, |a, d| a.checked_mul(*d))
        .ok_or_else(|| NpyError("shape overflows".into()))?;
    let need = count
        .checked_mul(itemsize)
        .ok_or_else(|| NpyError("size overflows".into()))?;
    let data = &bytes[hend..];
    if data.len() < need {
        return err(format!(
            "truncated .npy data: {} of {need} bytes",
            data.len()
        ));
    }
    Ok(Array {
        descr: descr.to_string(),
        fortran_order,
        shape,
        itemsize,
        data: data[..need].to_vec(),
    })
}

/// Serialise a C-ordered array (version 1 when the header fits, else 2).
pub fn write(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape_text = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    let mut out = Vec::with_capacity(data.len() + 128);
    let v1 = dict.len() + 1 + 10 <= u16::MAX as usize;
    let prefix = if v1 { 10 } else { 12 };
    let total = (prefix + dict.len() + 1).div_ceil(64) * 64;
    let hlen = total - prefix;
    out.extend_from_slice(MAGIC);
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(hlen as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&(hlen as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out.extend_from_slice(data);
    out
}

/// Permute the axes of a C-ordered array: output axis `i` is input axis `perm[i]`.
pub fn transpose(shape: &[usize], perm: &[usize], itemsize: usize, data: &[u8]) -> Vec<u8> {
    let n = shape.len();
    let mut in_strides = vec![itemsize; n];
    for i in (0..n.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * shape[i + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let strides: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let count: usize = shape.iter().product();
    let mut out = Vec::with_capacity(count * itemsize);
    if count == 0 {
        return out;
    }
    let mut idx = vec![0usize; n];
    let mut offset = 0usize;
    for _ in 0..count {
        out.extend_from_slice(&data[offset..offset + itemsize]);
        // Advance the output index (last axis fastest), keeping the input offset in step.
        for axis in (0..n).rev() {
            idx[axis] += 1;
            offset += strides[axis];
            if idx[axis] < out_shape[axis] {
                break;
            }
            offset -= strides[axis] * out_shape[axis];
            idx[axis] = 0;
        }
    }
    out
}

/// The array in C order (a Fortran-ordered array is transposed into C order).
pub(crate) fn to_c_order(a: &Array) -> Vec<u8> {
    if !a.fortran_order || a.shape.len() < 2 {
        return a.data.clone();
    }
    // Fortran data is the C data of the reversed shape; reversing the axes gives C order.
    let rev: Vec<usize> = a.shape.iter().rev().copied().collect();
    let perm: Vec<usize> = (0..rev.len()).rev().collect();
    transpose(&rev, &perm, a.itemsize, &a.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_parse() {
        let data: Vec<u8> = (0..24u8).collect();
        let bytes = write("<f4", &[2, 3], &data);
        assert_eq!((bytes.len() - data.len()) % 64, 0);
        let a = parse(&bytes).unwrap();
        assert_eq!(a.shape, [2, 3]);
        assert_eq!(a.itemsize, 4);
        assert_eq!(a.data, data);
        assert!(!a.fortran_order);
    }

    #[test]
    fn transpose_2d() {
        // [[0,1,2],[3,4,5]] -> [[0,3],[1,4],[2,5]]
        let data: Vec<u8> = (0..6u8).collect();
        assert_eq!(transpose(&[2, 3], &[1, 0], 1, &data), [0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn transpose_3d_matches_index_arithmetic() {
        let shape = [2, 3, 4];
        let perm = [2, 0, 1];
        let data: Vec<u8> = (0..24u8).collect();
        let out = transpose(&shape, &perm, 1, &data);
        let out_shape = [4, 2, 3];
        for a in 0..out_shape[0] {
            for b in 0..out_shape[1] {
                for c in 0..out_shape[2] {
                    // Output (a, b, c) is input index with axis2=a, axis0=b, axis1=c.
                    let src = b * 12 + c * 4 + a;
                    assert_eq!(out[a * 6 + b * 3 + c], data[src]);
                }
            }
        }
    }

    #[test]
    fn fortran_order_is_converted() {
        // Logical [[0,1,2],[3,4,5]] stored column-major: 0,3,1,4,2,5.
        let a = Array {
            descr: "|u1".into(),
            fortran_order: true,
            shape: vec![2, 3],
            itemsize: 1,
            data: vec![0, 3, 1, 4, 2, 5],
        };
        assert_eq!(to_c_order(&a), [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn rejects_bad_input() {
        assert!(parse(b"nope").is_err());
        let mut bytes = write("<f4", &[4], &[0; 16]);
        bytes.truncate(bytes.len() - 1);
        assert!(parse(&bytes).unwrap_err().0.contains("truncated"));
        assert!(parse(&write("O", &[1], &[0; 8])).is_err());
        assert_eq!(itemsize("<U3"), Some(12));
    }
}
