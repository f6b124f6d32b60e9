//! The guest image: the embedded ELF built from `guest/`, or one given with
//! `--guest PATH`, checked and loaded into guest memory.
//!
//! The image is untrusted input: every header field is checked against the
//! file and the memory layout before anything is copied.

use std::io::Cursor;

use linux_loader::loader::{elf::Elf, KernelLoader};
use tsc_contract::layout;
use vm_memory::{GuestAddress, GuestMemoryMmap};

/// The guest built by `vmm/build.rs`.
pub static EMBEDDED: &[u8] = include_bytes!(env!("TSC_GUEST_ELF"));

const PT_LOAD: u32 = 1;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;
const EM_X86_64: u16 = 62;
const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;
const PF_X: u32 = 1;

/// Why a guest image cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, displaydoc::Display)]
pub enum ImageError {
    /// the file is truncated ({0})
    Truncated(&'static str),
    /// not an ELF file
    NotElf,
    /// not a 64-bit little-endian x86-64 ELF
    WrongMachine,
    /// a position-independent (ET_DYN) image; link it static and non-PIE at a fixed address
    PositionIndependent,
    /// ELF type {0} is not an executable
    NotExecutable(u16),
    /// a segment at {addr:#x} ({size} bytes) lies outside the guest image area 0x100000..0x200000
    SegmentOutsideMemory {
        /// The segment's physical address.
        addr: u64,
        /// Its size in memory.
        size: u64,
    },
    /// a segment's file size exceeds its memory size
    BadSegment,
    /// no loadable segment
    NoSegments,
    /// entry point {0:#x} is not in an executable loaded segment
    BadEntry(u64),
    /// loading failed: {0}
    Load(String),
}

// The message above states the image area as literals: keep them true.
const _: () = assert!(layout::IMAGE == 0x10_0000 && layout::IMAGE_END == 0x20_0000);

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

/// Checks `image` against the ELF rules and the memory layout; returns the
/// entry point.
pub fn check(image: &[u8]) -> Result<u64, ImageError> {
    if image.len() >= 4 && &image[..4] != b"\x7fELF" {
        return Err(ImageError::NotElf);
    }
    if image.len() < EHDR_SIZE {
        return Err(if image.len() < 4 {
            ImageError::NotElf
        } else {
            ImageError::Truncated("ELF header")
        });
    }
    let short = ImageError::Truncated("ELF header");
    if image[4] != 2 || image[5] != 1 || u16_at(image, 18) != Some(EM_X86_64) {
        return Err(ImageError::WrongMachine);
    }
    match u16_at(image, 16).ok_or(short.clone())? {
        ET_EXEC => {}
        ET_DYN => return Err(ImageError::PositionIndependent),
        t => return Err(ImageError::NotExecutable(t)),
    }
    let entry = u64_at(image, 24).ok_or(short.clone())?;
    let phoff = u64_at(image, 32).ok_or(short.clone())?;
    let phentsize = u16_at(image, 54).ok_or(short.clone())?;
    let phnum = u16_at(image, 56).ok_or(short)?;
    if usize::from(phentsize) != PHDR_SIZE {
        return Err(ImageError::Truncated("program header size"));
    }
    let table_end = phoff
        .checked_add(u64::from(phnum) * PHDR_SIZE as u64)
        .ok_or(ImageError::Truncated("program headers"))?;
    if table_end > image.len() as u64 {
        return Err(ImageError::Truncated("program headers"));
    }
    let mut loads = 0;
    let mut entry_ok = false;
    for i in 0..usize::from(phnum) {
        let o = phoff as usize + i * PHDR_SIZE;
        let field = |off| u64_at(image, o + off).ok_or(ImageError::Truncated("program header"));
        if u32_at(image, o) != Some(PT_LOAD) {
            continue;
        }
        let flags = u32_at(image, o + 4).ok_or(ImageError::Truncated("program header"))?;
        let (offset, paddr, filesz, memsz) = (field(8)?, field(24)?, field(32)?, field(40)?);
        if filesz > memsz {
            return Err(ImageError::BadSegment);
        }
        let end = paddr.checked_add(memsz);
        if paddr < layout::IMAGE || end.is_none_or(|e| e > layout::IMAGE_END) {
            return Err(ImageError::SegmentOutsideMemory {
                addr: paddr,
                size: memsz,
            });
        }
        if offset
            .checked_add(filesz)
            .is_none_or(|e| e > image.len() as u64)
        {
            return Err(ImageError::Truncated("segment data"));
        }
        if flags & PF_X != 0 && entry >= paddr && entry < paddr + memsz {
            entry_ok = true;
        }
        loads += 1;
    }
    if loads == 0 {
        return Err(ImageError::NoSegments);
    }
    if !entry_ok {
        return Err(ImageError::BadEntry(entry));
    }
    Ok(entry)
}

/// Checks `image` and loads it into `mem`; returns the entry point.
pub fn load(mem: &GuestMemoryMmap, image: &[u8]) -> Result<u64, ImageError> {
    let entry = check(image)?;
    let result = Elf::load(
        mem,
        None,
        &mut Cursor::new(image),
        Some(GuestAddress(layout::IMAGE)),
    )
    .map_err(|e| ImageError::Load(e.to_string()))?;
    if result.kernel_load.0 != entry {
        return Err(ImageError::Load(format!(
            "the loader reports entry {:#x}, the header {entry:#x}",
            result.kernel_load.0
        )));
    }
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_guest_passes_the_checks() {
        let entry = check(EMBEDDED).expect("embedded guest is valid");
        assert!((layout::IMAGE..layout::IMAGE_END).contains(&entry));
    }

    #[test]
    fn garbage_is_not_an_elf() {
        assert_eq!(check(b"hello world"), Err(ImageError::NotElf));
        assert_eq!(check(b""), Err(ImageError::NotElf));
    }

    #[test]
    fn truncations_are_named() {
        assert!(matches!(
            check(&EMBEDDED[..40]),
            Err(ImageError::Truncated(_))
        ));
        assert!(matches!(
            check(&EMBEDDED[..200]),
            Err(ImageError::Truncated(_))
        ));
    }

    #[test]
    fn position_independent_images_are_refused() {
        let mut pie = EMBEDDED.to_vec();
        pie[16] = ET_DYN as u8;
        assert_eq!(check(&pie), Err(ImageError::PositionIndependent));
    }

    #[test]
    fn segments_outside_the_image_area_are_refused() {
        let mut bad = EMBEDDED.to_vec();
        let phoff = u64_at(&bad, 32).expect("header") as usize;
        // Move the first segment's physical address to 0.
        bad[phoff + 24..phoff + 32].copy_from_slice(&0u64.to_le_bytes());
        assert!(matches!(
            check(&bad),
            Err(ImageError::SegmentOutsideMemory { addr: 0, .. })
        ));
    }

    #[test]
    fn an_entry_outside_the_code_is_refused() {
        let mut bad = EMBEDDED.to_vec();
        bad[24..32].copy_from_slice(&0x1f_0000u64.to_le_bytes());
        assert_eq!(check(&bad), Err(ImageError::BadEntry(0x1f_0000)));
    }
}
