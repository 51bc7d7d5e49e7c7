//! The drivers' compiled pipelines, kept through wgpu's pipeline cache (Vulkan's
//! `VkPipelineCache`; wgpu has one on no other backend). The virtual devices of one adapter share
//! it, so the driver compiles a kernel for the first device and the others start from that work;
//! and it is kept on disk beside the autotune cache, so the next process starts from it too.
//!
//! wgpu cannot share a pipeline between devices, and a cache's contents are fixed when it is made.
//! So the adapter keeps the newest data any of its devices' caches returned, with a generation
//! count, and each device compiles with a cache of its own made from that data, made again when
//! another device has added to it. Two devices compiling at once may each add to the same
//! generation; the later one's data then wins and the other's pipeline is compiled again when next
//! needed: a cache miss, never a wrong pipeline.
//!
//! What a driver keeps is up to it: Mesa 22.3's lavapipe keeps nothing (its data is 96 bytes,
//! wgpu's header and Vulkan's), so on the development machine this changes no compile; NVIDIA's and newer Mesa's
//! drivers keep their compiled code.
//!
//! The file is `<cache dir>/pipelines/<wgpu's key of the adapter>.bin`: gangway's header (magic,
//! version, length, CRC-32) before wgpu's data, written atomically when the data first changes,
//! then at most every [`SAVE_EVERY`] (a driver's data can be megabytes, and a start-up compiles
//! dozens of pipelines per device), and when the adapter's last device is dropped.
//! A file that fails any check (or is over a gibibyte) is ignored and replaced by the next save;
//! one that cannot be written costs a compile in the next process, not this one's run, so write
//! errors are dropped. `GANGWAY_PIPELINE_CACHE=off` keeps nothing on disk.

use crate::fsutil;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Environment variable: `off` keeps no pipeline cache on disk.
pub const PIPELINE_CACHE_ENV: &str = "GANGWAY_PIPELINE_CACHE";

const MAGIC: &[u8; 8] = b"GWPIPEC\0";
const VERSION: u32 = 1;
/// Magic, version, data length (u64) and the data's CRC-32, little-endian.
const HEADER: usize = 8 + 4 + 8 + 4;
/// The least time between two saves of one adapter's file.
const SAVE_EVERY: Duration = Duration::from_secs(2);
/// A file larger than this is not read (drivers keep megabytes; a damaged size field or a
/// stray file must not take the memory).
const LARGEST_FILE: u64 = 1 << 30;

/// One adapter's pipeline-cache data, shared by its devices.
#[derive(Debug)]
pub(crate) struct AdapterPipelines {
    /// The adapter's file, when kept on disk.
    path: Option<PathBuf>,
    newest: Mutex<Newest>,
}

#[derive(Debug, Default)]
struct Newest {
    /// What the last device to add to its cache got from it (or the file's data).
    data: Option<Vec<u8>>,
    /// Counts the changes of `data`.
    generation: u64,
    /// The generation the file holds.
    saved: u64,
    /// When the file was last written.
    saved_at: Option<Instant>,
}

/// A device's own cache: made from the adapter's data of generation `.1`.
pub(crate) type DeviceCache = Option<(wgpu::PipelineCache, u64)>;

impl AdapterPipelines {
    /// `None` where the adapter has no pipeline cache. `dir`: where its file is kept (none: only
    /// its devices share it).
    pub fn new(adapter: &wgpu::Adapter, dir: Option<&Path>) -> Option<Arc<Self>> {
        if !adapter.features().contains(wgpu::Features::PIPELINE_CACHE) {
            return None;
        }
        let key = wgpu::util::pipeline_cache_key(&adapter.get_info())?;
        let path = dir.map(|d| d.join("pipelines").join(format!("{key}.bin")));
        let data = path
            .as_deref()
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() <= LARGEST_FILE))
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|bytes| decode(&bytes).map(<[u8]>::to_vec));
        Some(Arc::new(Self {
            path,
            newest: Mutex::new(Newest {
                data,
                ..Newest::default()
            }),
        }))
    }

    /// The file this adapter's pipelines are kept in, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The cache `device` compiles with: `mine` when it holds the adapter's newest data, else a
    /// new one made from that data (and kept in `mine`).
    pub fn cache(&self, device: &wgpu::Device, mine: &mut DeviceCache) -> wgpu::PipelineCache {
        let newest = self.newest.lock().unwrap_or_else(PoisonError::into_inner);
        match mine {
            Some((cache, generation)) if *generation == newest.generation => cache.clone(),
            _ => {
                let cache = made_from(device, newest.data.as_deref());
                *mine = Some((cache.clone(), newest.generation));
                cache
            }
        }
    }

    /// After a compile with `mine`'s cache: its data becomes the adapter's newest when it
    /// differs (the driver kept something new), and is saved.
    pub fn added(&self, mine: &mut DeviceCache) {
        let Some((cache, generation)) = mine else {
            return;
        };
        let Some(data) = cache.get_data() else {
            return;
        };
        let mut newest = self.newest.lock().unwrap_or_else(PoisonError::into_inner);
        if newest.data.as_deref() == Some(&data[..]) {
            return;
        }
        newest.generation += 1;
        *generation = newest.generation;
        newest.data = Some(data);
        if newest.saved_at.is_none_or(|at| at.elapsed() >= SAVE_EVERY) {
            self.save(&mut newest);
        }
    }

    /// Writes the newest data when the file does not hold it; under the lock, so an older
    /// generation never lands after a newer one.
    fn save(&self, newest: &mut Newest) {
        if let (Some(path), Some(data)) = (&self.path, &newest.data)
            && newest.saved != newest.generation
        {
            let _ = save(path, data);
            newest.saved = newest.generation;
            newest.saved_at = Some(Instant::now());
        }
    }
}

impl Drop for AdapterPipelines {
    /// The adapter's last device is gone: what was added since the last save.
    fn drop(&mut self) {
        let mut newest = std::mem::take(
            self.newest
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.save(&mut newest);
    }
}

/// A pipeline cache on `device` holding `data`.
#[allow(unsafe_code)]
fn made_from(device: &wgpu::Device, data: Option<&[u8]>) -> wgpu::PipelineCache {
    // SAFETY: wgpu asks that `data` be what `PipelineCache::get_data` returned. It is: either
    // this process's `get_data` of another device of the same adapter, or the file `save` wrote
    // from such data, read back whole (`decode` checks its length and CRC-32; wgpu checks its own
    // header's adapter, driver and length, and the driver its own header). Data made for another
    // adapter or driver is not used (`fallback`: an empty cache instead of an error).
    unsafe {
        device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
            label: Some("gangway pipelines"),
            data,
            fallback: true,
        })
    }
}

fn save(path: &Path, data: &[u8]) -> crate::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(crate::Error::io(dir))?;
    }
    fsutil::write_atomic(path, &encode(data))
}

/// The file's bytes for `data`.
fn encode(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// The data in a file's bytes, `None` unless every check passes.
fn decode(bytes: &[u8]) -> Option<&[u8]> {
    let (header, data) = bytes.split_at_checked(HEADER)?;
    let (magic, rest) = header.split_at(MAGIC.len());
    let version = u32::from_le_bytes(rest[..4].try_into().ok()?);
    let len = u64::from_le_bytes(rest[4..12].try_into().ok()?);
    let crc = u32::from_le_bytes(rest[12..16].try_into().ok()?);
    (magic == MAGIC
        && version == VERSION
        && len == data.len() as u64
        && crc == crc32fast::hash(data))
    .then_some(data)
}

#[cfg(test)]
mod tests {
    use super::{HEADER, decode, encode};

    #[test]
    fn the_file_format_round_trips_and_refuses_damage() {
        let data: Vec<u8> = (0..200u32).map(|i| (i * 7) as u8).collect();
        let file = encode(&data);
        assert_eq!(file.len(), HEADER + data.len());
        assert_eq!(decode(&file), Some(&data[..]));
        assert_eq!(decode(&encode(&[])), Some(&[][..]));
        // Truncated anywhere, extended, or any byte flipped: refused.
        for cut in [0, 5, HEADER - 1, HEADER, file.len() - 1] {
            assert_eq!(decode(&file[..cut]), None, "cut at {cut}");
        }
        let mut longer = file.clone();
        longer.push(0);
        assert_eq!(decode(&longer), None);
        for at in [0, 9, 13, 21, HEADER, file.len() - 1] {
            let mut bad = file.clone();
            bad[at] ^= 0x10;
            assert_eq!(decode(&bad), None, "byte {at} flipped");
        }
    }
}
