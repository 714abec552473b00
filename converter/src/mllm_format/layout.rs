//! The binary parts of a `.mllm` file (FORMAT.md): the 64-byte fixed header
//! and the tensor table, encoded by the writer and decoded by the reader
//! from one description, so the two cannot drift apart. Decoding checks
//! every length against the bytes that remain before reading or allocating;
//! the meaning of the values (bounds, overlaps) is the reader's job.

use super::types::StoredType;

/// `\x89MLLM\r\n\x1a`: not ASCII, and a text-mode transfer breaks it.
pub const MAGIC: [u8; 8] = *b"\x89MLLM\r\n\x1a";
pub const MAJOR: u16 = 1;
pub const MINOR: u16 = 0;
pub const HEADER_LEN: usize = 64;
/// Alignment of tensor data written today: an AVX-512 register and a cache line.
pub const DEFAULT_ALIGNMENT: u32 = 64;
pub const MIN_ALIGNMENT: u32 = 64;
pub const MAX_ALIGNMENT: u32 = 65536;
/// Reader limits (FORMAT.md, "Limits").
pub const MAX_SECTION: u64 = 1 << 30;
pub const MAX_TENSORS: u32 = 1 << 20;
pub const MAX_NAME: usize = 4096;
pub const MAX_RANK: usize = 8;
pub const MAX_ELEMENTS: u64 = 1 << 48;
/// Where `header_crc32` sits; it is zero while the CRC is computed.
const CRC_FIELD: std::ops::Range<usize> = 52..56;

/// The fixed header, field for field.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub major: u16,
    pub minor: u16,
    pub alignment: u32,
    pub meta_len: u64,
    pub table_len: u64,
    pub data_offset: u64,
    pub data_len: u64,
    pub tensor_count: u32,
    pub header_crc32: u32,
}

impl Header {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8..10].copy_from_slice(&self.major.to_le_bytes());
        b[10..12].copy_from_slice(&self.minor.to_le_bytes());
        b[12..16].copy_from_slice(&self.alignment.to_le_bytes());
        b[16..24].copy_from_slice(&self.meta_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.table_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.data_offset.to_le_bytes());
        b[40..48].copy_from_slice(&self.data_len.to_le_bytes());
        b[48..52].copy_from_slice(&self.tensor_count.to_le_bytes());
        b[CRC_FIELD].copy_from_slice(&self.header_crc32.to_le_bytes());
        b
    }

    /// Decodes the first 64 bytes, checking magic, version and reserved bytes.
    pub fn decode(b: &[u8]) -> Result<Header, String> {
        if b.len() < HEADER_LEN {
            return Err(format!(
                "the file is {} bytes, shorter than the {HEADER_LEN}-byte header",
                b.len()
            ));
        }
        if b[..8] != MAGIC {
            let hint = if b.starts_with(b"GGUF") {
                " (it is a GGUF file)"
            } else if b[..5] == MAGIC[..5] || b[1..5] == MAGIC[1..5] {
                " (its magic is damaged, as by a text-mode transfer)"
            } else {
                ""
            };
            return Err(format!(
                "not an .mllm file: it starts with {:02x?}{hint}",
                &b[..8]
            ));
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(a)
        };
        let h = Header {
            major: u16_at(8),
            minor: u16_at(10),
            alignment: u32_at(12),
            meta_len: u64_at(16),
            table_len: u64_at(24),
            data_offset: u64_at(32),
            data_len: u64_at(40),
            tensor_count: u32_at(48),
            header_crc32: u32_at(52),
        };
        if h.major != MAJOR {
            return Err(format!(
                ".mllm format version {}.{} is not supported (this reader reads version {MAJOR}.x)",
                h.major, h.minor
            ));
        }
        if b[56..64].iter().any(|&x| x != 0) {
            return Err("the reserved header bytes 56..64 are not zero".into());
        }
        Ok(h)
    }
}

/// CRC-32 of the eager part of a file (`0 .. 64 + meta_len + table_len`),
/// with the CRC field itself read as zero.
pub fn header_crc(eager: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&eager[..CRC_FIELD.start]);
    h.update(&[0u8; 4]);
    h.update(&eager[CRC_FIELD.end..]);
    h.finalize()
}

/// One table entry as stored. Offsets are relative to the data section.
#[derive(Clone, Debug, PartialEq)]
pub struct RawEntry {
    pub name: String,
    pub ty: u32,
    pub requested: u32,
    pub dims: Vec<u64>,
    pub offset: u64,
    pub byte_len: u64,
    pub crc32: u32,
}

impl RawEntry {
    /// Bytes this entry takes in the table.
    pub fn encoded_len(&self) -> usize {
        2 + self.name.len() + 4 + 4 + 1 + 8 * self.dims.len() + 8 + 8 + 4
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        // The writer only builds entries with names and ranks in range.
        out.extend_from_slice(&(self.name.len() as u16).to_le_bytes());
        out.extend_from_slice(self.name.as_bytes());
        out.extend_from_slice(&self.ty.to_le_bytes());
        out.extend_from_slice(&self.requested.to_le_bytes());
        out.push(self.dims.len() as u8);
        for d in &self.dims {
            out.extend_from_slice(&d.to_le_bytes());
        }
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.byte_len.to_le_bytes());
        out.extend_from_slice(&self.crc32.to_le_bytes());
    }
}

/// Smallest encoded entry: a one-byte name and rank 0.
const MIN_ENTRY: u64 = 2 + 1 + 4 + 4 + 1 + 8 + 8 + 4;

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.b.len() - self.pos {
            return Err(format!(
                "needs {n} bytes at table offset {} but the table ends at {}",
                self.pos,
                self.b.len()
            ));
        }
        let s = &self.b[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
}

/// Parses `count` entries that must fill `table` exactly.
pub fn decode_table(table: &[u8], count: u32) -> Result<Vec<RawEntry>, String> {
    if count > MAX_TENSORS {
        return Err(format!(
            "the header claims {count} tensors; the limit is {MAX_TENSORS}"
        ));
    }
    if (count as u64) * MIN_ENTRY > table.len() as u64 {
        return Err(format!(
            "the header claims {count} tensors, more than a {}-byte table can hold",
            table.len()
        ));
    }
    let mut c = Cursor { b: table, pos: 0 };
    let mut out = Vec::with_capacity(count as usize);
    for i in 0..count {
        let e = decode_entry(&mut c).map_err(|m| format!("tensor table entry {i}: {m}"))?;
        out.push(e);
    }
    if c.pos != table.len() {
        return Err(format!(
            "the tensor table has {} bytes after its {count} entries",
            table.len() - c.pos
        ));
    }
    Ok(out)
}

fn decode_entry(c: &mut Cursor) -> Result<RawEntry, String> {
    let n = u16::from_le_bytes(c.array()?) as usize;
    if n == 0 || n > MAX_NAME {
        return Err(format!("name length {n} is not in 1..={MAX_NAME}"));
    }
    let raw = c.take(n)?;
    let name = std::str::from_utf8(raw)
        .map_err(|_| {
            format!(
                "name {:?} is not UTF-8",
                String::from_utf8_lossy(&raw[..n.min(64)])
            )
        })?
        .to_string();
    let fail = |m: String| format!("`{name}`: {m}");
    let ty = u32::from_le_bytes(c.array().map_err(fail)?);
    let requested = u32::from_le_bytes(c.array().map_err(fail)?);
    let rank = c.array::<1>().map_err(fail)?[0] as usize;
    if rank > MAX_RANK {
        return Err(fail(format!("rank {rank} is more than {MAX_RANK}")));
    }
    let mut dims = Vec::with_capacity(rank);
    for _ in 0..rank {
        dims.push(u64::from_le_bytes(c.array().map_err(fail)?));
    }
    let offset = u64::from_le_bytes(c.array().map_err(fail)?);
    let byte_len = u64::from_le_bytes(c.array().map_err(fail)?);
    let crc32 = u32::from_le_bytes(c.array().map_err(fail)?);
    Ok(RawEntry {
        name,
        ty,
        requested,
        dims,
        offset,
        byte_len,
        crc32,
    })
}

/// Checks an entry's type and shape agree with its byte length, and returns
/// the stored and requested types.
pub fn check_entry_type(e: &RawEntry) -> Result<(StoredType, StoredType), String> {
    let cols = e.dims.last().map_or(1, |&c| c as usize);
    let ty = StoredType::from_ggml_id(e.ty, cols)
        .ok_or_else(|| format!("unknown stored type id {}", e.ty))?;
    let requested = StoredType::from_ggml_id(e.requested, cols)
        .ok_or_else(|| format!("unknown requested type id {}", e.requested))?;
    e.dims
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| format!("shape {:?} has more than 2^48 elements", e.dims))?;
    let need = ty.byte_len(&e.dims).map_err(|m| format!("{ty}: {m}"))?;
    if need != e.byte_len {
        return Err(format!(
            "{ty} of shape {:?} takes {need} bytes, but the table says {}",
            e.dims, e.byte_len
        ));
    }
    Ok((ty, requested))
}
