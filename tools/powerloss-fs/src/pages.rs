//! Page bookkeeping for one file: the unsynced bytes held in memory over its durable content.
//!
//! A file's visible content is its durable content (what the backing file holds) seen through an
//! [`Overlay`]: 4 KiB pages written since the last sync, the visible size, and how much of the
//! durable content a truncation has cut since then. A sync applies the overlay to the durable
//! content ([`Overlay::apply`]); a failed sync or a power loss drops it ([`Overlay::discard`]).

use std::cmp::{max, min};
use std::collections::BTreeMap;
use std::io;

/// The size of a page: the unit that a torn power loss lets through or drops.
pub const PAGE_SIZE: u64 = 4096;

/// Where a file's durable content lives: the backing file, or (in tests) a vector.
pub trait Content {
    /// Fills `buffer` with the bytes at `offset`; the range lies within the content.
    fn read_exact_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<()>;
    fn write_all_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

impl Content for Vec<u8> {
    fn read_exact_at(&self, offset: u64, buffer: &mut [u8]) -> io::Result<()> {
        let start = offset as usize;
        let source = self
            .get(start..start + buffer.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buffer.copy_from_slice(source);
        Ok(())
    }

    fn write_all_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset as usize + data.len();
        if self.len() < end {
            self.resize(end, 0);
        }
        self[offset as usize..end].copy_from_slice(data);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.resize(len as usize, 0);
        Ok(())
    }
}

/// The unsynced state of one file over its durable content.
///
/// Invariants: `durable_valid <= min(size, durable_size)`; every held page lies below `size`
/// (starts before it) and holds zeros past `size`.
#[derive(Debug)]
pub struct Overlay {
    /// The visible size.
    size: u64,
    /// The size of the durable content.
    durable_size: u64,
    /// Durable bytes at and past this offset were cut by a truncation since the last sync: they
    /// read as zeros (or as what was written over them since).
    durable_valid: u64,
    /// Pages written since the last sync, whole, by page index.
    pages: BTreeMap<u64, Box<[u8]>>,
}

impl Overlay {
    /// A clean overlay over durable content of `durable_size` bytes.
    pub fn new(durable_size: u64) -> Self {
        Overlay {
            size: durable_size,
            durable_size,
            durable_valid: durable_size,
            pages: BTreeMap::new(),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn durable_size(&self) -> u64 {
        self.durable_size
    }

    /// Whether a sync would change the durable content.
    pub fn is_dirty(&self) -> bool {
        !self.pages.is_empty()
            || self.size != self.durable_size
            || self.durable_valid < self.durable_size
    }

    /// How many pages are held unsynced.
    pub fn dirty_pages(&self) -> usize {
        self.pages.len()
    }

    /// Whether the durable content is needed to serve reads and writes.
    pub fn reads_durable(&self) -> bool {
        self.durable_valid > 0
    }

    /// Fills `out` with what lies under the overlay at `offset`: durable bytes where they are
    /// still valid, zeros past that.
    fn base(&self, offset: u64, out: &mut [u8], durable: &dyn Content) -> io::Result<()> {
        let end = offset + out.len() as u64;
        let durable_end = min(end, self.durable_valid);
        let split = if offset < durable_end {
            let split = (durable_end - offset) as usize;
            durable.read_exact_at(offset, &mut out[..split])?;
            split
        } else {
            0
        };
        out[split..].fill(0);
        Ok(())
    }

    /// Reads up to `len` bytes at `offset`, as a page cache would serve them.
    pub fn read(&self, offset: u64, len: u32, durable: &dyn Content) -> io::Result<Vec<u8>> {
        if offset >= self.size {
            return Ok(Vec::new());
        }
        let end = min(self.size, offset.saturating_add(u64::from(len)));
        let mut out = vec![0u8; (end - offset) as usize];
        let mut at = offset;
        // Runs of pages that are not held are read from the durable content in one call.
        let mut clean_from: Option<u64> = None;
        while at < end {
            let page = at / PAGE_SIZE;
            let page_start = page * PAGE_SIZE;
            let chunk_end = min(page_start + PAGE_SIZE, end);
            match self.pages.get(&page) {
                Some(held) => {
                    if let Some(from) = clean_from.take() {
                        self.base(
                            from,
                            &mut out[(from - offset) as usize..(at - offset) as usize],
                            durable,
                        )?;
                    }
                    out[(at - offset) as usize..(chunk_end - offset) as usize].copy_from_slice(
                        &held[(at - page_start) as usize..(chunk_end - page_start) as usize],
                    );
                }
                None => {
                    clean_from.get_or_insert(at);
                }
            }
            at = chunk_end;
        }
        if let Some(from) = clean_from {
            self.base(from, &mut out[(from - offset) as usize..], durable)?;
        }
        Ok(out)
    }

    /// Writes `data` at `offset`, growing the visible size if it ends past it.
    pub fn write(&mut self, offset: u64, data: &[u8], durable: &dyn Content) -> io::Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        let mut at = offset;
        while at < end {
            let page = at / PAGE_SIZE;
            let page_start = page * PAGE_SIZE;
            let chunk_end = min(page_start + PAGE_SIZE, end);
            if !self.pages.contains_key(&page) {
                let mut fresh = vec![0u8; PAGE_SIZE as usize].into_boxed_slice();
                let whole = at == page_start && chunk_end == page_start + PAGE_SIZE;
                if !whole {
                    self.base(page_start, &mut fresh, durable)?;
                }
                self.pages.insert(page, fresh);
            }
            let held = self.pages.get_mut(&page).expect("inserted above");
            held[(at - page_start) as usize..(chunk_end - page_start) as usize]
                .copy_from_slice(&data[(at - offset) as usize..(chunk_end - offset) as usize]);
            at = chunk_end;
        }
        self.size = max(self.size, end);
        Ok(())
    }

    /// Sets the visible size: cut bytes are gone (a later extension reads zeros there).
    pub fn truncate(&mut self, size: u64) {
        if size < self.size {
            let first_gone = size.div_ceil(PAGE_SIZE);
            self.pages.split_off(&first_gone);
            if !size.is_multiple_of(PAGE_SIZE) {
                if let Some(held) = self.pages.get_mut(&(size / PAGE_SIZE)) {
                    held[(size % PAGE_SIZE) as usize..].fill(0);
                }
            }
            self.durable_valid = min(self.durable_valid, size);
        }
        self.size = size;
    }

    /// The held pages, each as its offset and its bytes below the visible size.
    pub fn held_pages(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.pages.iter().map(|(page, bytes)| {
            let start = page * PAGE_SIZE;
            let len = min(PAGE_SIZE, self.size - start) as usize;
            (start, &bytes[..len])
        })
    }

    /// Makes the durable content equal to the visible content, then holds nothing.
    pub fn apply(&mut self, durable: &mut dyn Content) -> io::Result<()> {
        if self.durable_valid < self.durable_size {
            durable.set_len(self.durable_valid)?;
        }
        for (offset, bytes) in self.held_pages() {
            durable.write_all_at(offset, bytes)?;
        }
        durable.set_len(self.size)?;
        self.pages.clear();
        self.durable_size = self.size;
        self.durable_valid = self.size;
        Ok(())
    }

    /// Writes the held pages for which `keep` says yes (in page order) to the durable content,
    /// as a torn power loss would, leaving sizes and truncations alone. Returns how many.
    pub fn write_torn(
        &self,
        durable: &mut dyn Content,
        keep: &mut dyn FnMut() -> bool,
    ) -> io::Result<usize> {
        let mut written = 0;
        for (offset, bytes) in self.held_pages() {
            if keep() {
                durable.write_all_at(offset, bytes)?;
                written += 1;
            }
        }
        Ok(written)
    }

    /// Drops everything unsynced: the visible content is the durable content again.
    pub fn discard(&mut self) {
        self.pages.clear();
        self.size = self.durable_size;
        self.durable_valid = self.durable_size;
    }
}

/// A small seeded generator (SplitMix64): the same seed lets the same pages through.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn coin(&mut self) -> bool {
        self.next_u64() >> 63 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = PAGE_SIZE as usize;

    fn visible(overlay: &Overlay, durable: &Vec<u8>) -> Vec<u8> {
        overlay.read(0, u32::MAX, durable).unwrap()
    }

    #[test]
    fn reads_see_writes_over_the_durable_content() {
        let durable: Vec<u8> = (0..3 * P).map(|i| (i % 251) as u8).collect();
        let mut overlay = Overlay::new(durable.len() as u64);
        overlay.write(P as u64 - 2, b"abcd", &durable).unwrap();
        let mut expected = durable.clone();
        expected[P - 2..P + 2].copy_from_slice(b"abcd");
        assert_eq!(visible(&overlay, &durable), expected);
        assert_eq!(overlay.dirty_pages(), 2);
        // A read across held and clean pages, starting mid-page.
        assert_eq!(
            overlay.read(10, (2 * P) as u32, &durable).unwrap(),
            expected[10..10 + 2 * P]
        );
        // Reads stop at the visible end.
        assert_eq!(
            overlay.read(3 * P as u64 - 1, 100, &durable).unwrap(),
            expected[3 * P - 1..]
        );
        assert!(overlay
            .read(3 * P as u64, 100, &durable)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_sync_makes_the_durable_content_equal_to_what_reads_saw() {
        let mut durable: Vec<u8> = vec![7; 2 * P + 100];
        let mut overlay = Overlay::new(durable.len() as u64);
        overlay.write(5 * P as u64 + 3, b"tail", &durable).unwrap();
        overlay.write(0, b"head", &durable).unwrap();
        let seen = visible(&overlay, &durable);
        assert_eq!(seen.len(), 5 * P + 7);
        assert!(
            seen[2 * P + 100..5 * P + 3].iter().all(|&b| b == 0),
            "a gap reads as zeros"
        );
        overlay.apply(&mut durable).unwrap();
        assert_eq!(durable, seen);
        assert!(!overlay.is_dirty());
        assert_eq!(overlay.durable_size(), seen.len() as u64);
    }

    #[test]
    fn truncating_cuts_durable_bytes_that_a_later_extension_must_not_bring_back() {
        let mut durable: Vec<u8> = vec![9; 3 * P];
        let mut overlay = Overlay::new(durable.len() as u64);
        overlay.write(P as u64, b"xyz", &durable).unwrap();
        overlay.truncate(P as u64 + 1);
        assert_eq!(overlay.size(), P as u64 + 1);
        overlay.truncate(3 * P as u64);
        let seen = visible(&overlay, &durable);
        let mut expected = vec![9u8; P];
        expected.push(b'x');
        expected.resize(3 * P, 0);
        assert_eq!(seen, expected);
        // A write into a clean page past the cut reads zeros around it, not the old bytes.
        overlay.write(2 * P as u64 + 10, b"q", &durable).unwrap();
        let seen = visible(&overlay, &durable);
        assert_eq!(seen[2 * P + 9..2 * P + 12], [0, b'q', 0]);
        overlay.apply(&mut durable).unwrap();
        assert_eq!(durable, seen);
    }

    #[test]
    fn discarding_returns_to_the_durable_content() {
        let durable: Vec<u8> = b"durable".to_vec();
        let mut overlay = Overlay::new(durable.len() as u64);
        overlay.write(0, b"VOLATILE-AND-LONGER", &durable).unwrap();
        overlay.truncate(3);
        assert!(overlay.is_dirty());
        overlay.discard();
        assert!(!overlay.is_dirty());
        assert_eq!(visible(&overlay, &durable), durable);
    }

    #[test]
    fn whole_page_writes_do_not_read_the_durable_content() {
        struct Unreadable;
        impl Content for Unreadable {
            fn read_exact_at(&self, _: u64, _: &mut [u8]) -> io::Result<()> {
                Err(io::Error::other("read"))
            }
            fn write_all_at(&mut self, _: u64, _: &[u8]) -> io::Result<()> {
                Ok(())
            }
            fn set_len(&mut self, _: u64) -> io::Result<()> {
                Ok(())
            }
        }
        let mut overlay = Overlay::new(4 * PAGE_SIZE);
        overlay
            .write(PAGE_SIZE, &vec![1u8; 2 * P], &Unreadable)
            .unwrap();
        assert!(overlay.write(10, b"partial", &Unreadable).is_err());
    }

    #[test]
    fn a_torn_write_lets_through_the_chosen_pages_only() {
        let mut durable: Vec<u8> = vec![b'a'; 8 * P];
        let mut overlay = Overlay::new(durable.len() as u64);
        overlay.write(0, &vec![b'b'; 8 * P], &durable).unwrap();
        let mut index = 0;
        let written = overlay
            .write_torn(&mut durable, &mut || {
                index += 1;
                index % 3 == 0
            })
            .unwrap();
        assert_eq!(written, 2);
        let torn: Vec<bool> = durable
            .chunks(P)
            .map(|page| page.iter().all(|&b| b == b'b'))
            .collect();
        assert_eq!(torn, [false, false, true, false, false, true, false, false]);
        assert!(
            durable
                .chunks(P)
                .all(|page| page.iter().all(|&b| b == page[0])),
            "pages are whole"
        );
    }

    #[test]
    fn the_generator_is_seeded() {
        let a: Vec<u64> = {
            let mut rng = Rng::new(42);
            (0..8).map(|_| rng.next_u64()).collect()
        };
        let mut rng = Rng::new(42);
        assert_eq!(a, (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>());
        let mut other = Rng::new(43);
        assert_ne!(a[0], other.next_u64());
        let heads = (0..1000).filter(|_| rng.coin()).count();
        assert!((400..600).contains(&heads), "{heads}");
    }
}
