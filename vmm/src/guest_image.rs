//! The guest image: the embedded ELF built from `guest/`, or one given with
//! `--guest PATH`, checked and loaded into guest memory.
//!
//! The image is untrusted input: every header field is checked against the
//! file and the memory layout before anything is copied.
//!
//! With more vCPUs than host cores the VMM rewrites the guest's `pause`
//! instructions, which the guest lists in its section `.tsc_pause_sites`,
//! into `out 0xea, al` ([`tsc_contract::ports::YIELD`], the same two bytes):
//! a spin-wait then yields its host thread instead of spinning through a
//! scheduler slice ([`patch_pause_sites`]). Every listed site is checked to
//! be a `pause` in an executable loaded segment first.

use std::io::Cursor;

use linux_loader::loader::{elf::Elf, KernelLoader};
use tsc_contract::layout;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

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

/// The section in which the guest lists its `pause` instructions (one
/// little-endian u64 address each), not loaded.
pub const PAUSE_SITES: &str = ".tsc_pause_sites";

/// `pause`.
const PAUSE: [u8; 2] = [0xf3, 0x90];

/// The most sites an image may list (far more than any guest has).
const MAX_SITES: usize = 4096;

/// The bytes of the section named `name`, `None` when the image has no
/// such section or its section headers do not hold together (an image
/// without them is still a valid image: it just lists nothing).
fn section<'a>(image: &'a [u8], name: &str) -> Option<&'a [u8]> {
    const SHDR_SIZE: usize = 64;
    let shoff = usize::try_from(u64_at(image, 40)?).ok()?;
    if usize::from(u16_at(image, 58)?) != SHDR_SIZE {
        return None;
    }
    let shnum = usize::from(u16_at(image, 60)?);
    let shstrndx = usize::from(u16_at(image, 62)?);
    let header = |i: usize| -> Option<(u32, &'a [u8])> {
        let o = shoff.checked_add(i.checked_mul(SHDR_SIZE)?)?;
        let name = u32_at(image, o)?;
        let off = usize::try_from(u64_at(image, o + 24)?).ok()?;
        let size = usize::try_from(u64_at(image, o + 32)?).ok()?;
        Some((name, image.get(off..off.checked_add(size)?)?))
    };
    let (_, names) = header(shstrndx).filter(|_| shstrndx < shnum)?;
    (0..shnum).find_map(|i| {
        let (at, bytes) = header(i)?;
        let rest = names.get(at as usize..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        (&rest[..end] == name.as_bytes()).then_some(bytes)
    })
}

/// Where the guest's listed `pause` instructions are in guest-physical
/// memory, each checked to be the two bytes of a `pause` inside the file
/// part of an executable loaded segment. An image that lists none (or
/// whose list is unusable) gives none: its spin-waits are left alone.
pub fn pause_sites(image: &[u8]) -> Result<Vec<u64>, ImageError> {
    check(image)?;
    let Some(list) = section(image, PAUSE_SITES) else {
        return Ok(Vec::new());
    };
    if list.len() % 8 != 0 || list.len() / 8 > MAX_SITES {
        return Ok(Vec::new());
    }
    let phoff = u64_at(image, 32).unwrap_or(0) as usize;
    let phnum = usize::from(u16_at(image, 56).unwrap_or(0));
    // (vaddr, paddr, file offset, file size) of every executable PT_LOAD;
    // `check` vouched for the headers and their file ranges.
    let code: Vec<(u64, u64, u64, u64)> = (0..phnum)
        .filter_map(|i| {
            let o = phoff + i * PHDR_SIZE;
            let exec = u32_at(image, o)? == PT_LOAD && u32_at(image, o + 4)? & PF_X != 0;
            exec.then_some((
                u64_at(image, o + 16)?,
                u64_at(image, o + 24)?,
                u64_at(image, o + 8)?,
                u64_at(image, o + 32)?,
            ))
        })
        .collect();
    let mut sites = Vec::with_capacity(list.len() / 8);
    for chunk in list.chunks_exact(8) {
        let at = u64_at(chunk, 0).unwrap_or(0);
        let found = code.iter().find_map(|&(vaddr, paddr, off, filesz)| {
            let rel = at.checked_sub(vaddr)?;
            (rel.checked_add(2)? <= filesz).then_some((paddr + rel, off + rel))
        });
        let Some((phys, file)) = found else {
            return Ok(Vec::new());
        };
        if image.get(file as usize..file as usize + 2) != Some(&PAUSE[..]) {
            return Ok(Vec::new());
        }
        sites.push(phys);
    }
    Ok(sites)
}

/// Rewrites every listed `pause` of the loaded `image` in `mem` into
/// `out port, al` (`port` below 0x100); returns how many it rewrote (0: the
/// image lists none, and nothing was changed). Only before any vCPU runs.
pub fn patch_pause_sites(
    mem: &GuestMemoryMmap,
    image: &[u8],
    port: u16,
) -> Result<usize, ImageError> {
    let Ok(port) = u8::try_from(port) else {
        return Err(ImageError::Load(format!(
            "port {port:#x} has no `out imm8, al` form"
        )));
    };
    let sites = pause_sites(image)?;
    for &at in &sites {
        mem.write_slice(&[0xe6, port], GuestAddress(at))
            .map_err(|e| ImageError::Load(format!("rewriting the pause at {at:#x}: {e}")))?;
    }
    Ok(sites.len())
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

    /// The embedded guest lists its pauses, and every one is a pause in
    /// its code; an image whose list points elsewhere lists none.
    #[test]
    fn the_embedded_guest_lists_its_pauses() {
        let sites = pause_sites(EMBEDDED).expect("a valid image");
        assert!(!sites.is_empty(), "the guest's relax() lists its pause");
        assert!(sites
            .iter()
            .all(|s| (layout::IMAGE..layout::IMAGE_END).contains(s)));
        let mut bad = EMBEDDED.to_vec();
        let list = section(EMBEDDED, PAUSE_SITES).expect("listed");
        let at = list.as_ptr() as usize - EMBEDDED.as_ptr() as usize;
        // The first site one byte on: no longer a pause.
        bad[at] = bad[at].wrapping_add(1);
        assert_eq!(pause_sites(&bad), Ok(Vec::new()));
        assert!(matches!(pause_sites(b"garbage"), Err(ImageError::NotElf)));
    }

    /// Whatever an image's section headers and list say, reading the list
    /// never panics, and every site it gives is a pause inside the image
    /// area of the image as given.
    #[test]
    fn mangled_section_headers_and_lists_are_survived() {
        let shoff = u64_at(EMBEDDED, 40).expect("header") as usize;
        let list_at = section(EMBEDDED, PAUSE_SITES).expect("listed").as_ptr() as usize
            - EMBEDDED.as_ptr() as usize;
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut img = EMBEDDED.to_vec();
            // The ELF header's section fields, the section headers, the list.
            let at = match i % 3 {
                0 => 40 + (x as usize % 24),
                1 => shoff + (x as usize % (img.len() - shoff)),
                _ => list_at + (x as usize % 168),
            };
            if let Some(b) = img.get_mut(at) {
                *b = (x >> 32) as u8;
            }
            if let Ok(sites) = pause_sites(&img) {
                for s in sites {
                    assert!((layout::IMAGE..layout::IMAGE_END).contains(&s), "{s:#x}");
                }
            }
        }
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
