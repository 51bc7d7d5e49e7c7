//! Devices: discovery on every backend, virtual devices, device info and limits (the adapter's, or
//! WebGPU's defaults) with what a kernel needs of them (`needs.rs`), and the few GPU operations
//! everything else is built from (buffers, readback, cached pipelines, error capture; each
//! shader parsed once per process in `parsed.rs`, and the driver's compiled pipelines shared by
//! an adapter's devices and kept on disk in `pipeline_cache.rs`), and the
//! counts of what they did: kernel launches ([`launches`]) and GPU objects created
//! ([`objects_created`]), per process and per device.

mod backends;
mod discovery;
mod info;
mod mesh_device;
mod needs;
mod parsed;
mod pipeline_cache;
mod pool;

pub use backends::{backends_to_string, parse_backends};
pub use discovery::{
    BACKEND_ENV, DEFAULT_ADAPTER_BUDGET, DiscoveryOptions, LIMITS_ENV, LimitsMode,
    MEMORY_BUDGET_ENV, VIRTUAL_DEVICES_ENV, WAIT_TIMEOUT_ENV, discover, parse_bytes,
    parse_virtual_devices,
};
pub use info::{DeviceFeatures, DeviceInfo, DeviceLimits};
pub use mesh_device::{DeviceList, MeshDevice, RemoteDevice};
pub use needs::KernelNeeds;
pub use pipeline_cache::PIPELINE_CACHE_ENV;
pub use pool::{MemoryStats, Reservation, WhenFull};

use crate::{DType, Error, Result};
use pipeline_cache::{AdapterPipelines, DeviceCache};
use pool::MemoryPool;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// One `wgpu::Device` and its queue. Cheap to clone; clones share the device.
#[derive(Clone)]
pub struct Device(Arc<DeviceInner>);

struct DeviceInner {
    info: DeviceInfo,
    device: wgpu::Device,
    queue: wgpu::Queue,
    /// Set by wgpu's callbacks: a lost device, or a validation error nobody captured.
    failure: Arc<Mutex<Option<Error>>>,
    pipelines: Mutex<Pipelines>,
    /// The driver's compiled pipelines, shared with the adapter's other devices (and kept on
    /// disk), where the backend has a pipeline cache.
    adapter_pipelines: Option<Arc<AdapterPipelines>>,
    /// Shared by all devices of one GL adapter; see [`Device::serial`].
    gl_lock: Option<Arc<Mutex<()>>>,
    /// Held by every call that runs wgpu-core's `Device::maintain`; see [`Device::maintaining`].
    maintain_lock: Mutex<()>,
    memory: Arc<MemoryPool>,
    wait_timeout: Duration,
    /// GPU objects this device has created; see [`Device::objects_created`].
    objects: std::sync::atomic::AtomicU64,
    /// See [`Device::unused_storage`]; made on first use.
    unused_storage: Mutex<Option<wgpu::Buffer>>,
}

/// A device's compiled pipelines by key, and the pipeline cache it compiles with.
#[derive(Default)]
struct Pipelines {
    compiled: HashMap<String, wgpu::ComputePipeline>,
    cache: DeviceCache,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Device").field(&self.0.info.label()).finish()
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
impl Eq for Device {}

impl Device {
    pub(crate) fn new(
        info: DeviceInfo,
        device: wgpu::Device,
        queue: wgpu::Queue,
        gl_lock: Option<Arc<Mutex<()>>>,
        adapter_pipelines: Option<Arc<AdapterPipelines>>,
        memory_budget: u64,
        wait_timeout: Duration,
    ) -> Self {
        let failure: Arc<Mutex<Option<Error>>> = Arc::default();
        let label = info.label();
        let label_for_pool = label.clone();
        {
            // wgpu's default handler panics; we turn uncaptured errors into a typed error instead.
            let failure = failure.clone();
            let label = label.clone();
            device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
                let mut slot = failure.lock().unwrap_or_else(PoisonError::into_inner);
                slot.get_or_insert(Error::Gpu {
                    what: label.clone(),
                    message: e.to_string(),
                });
            }));
        }
        {
            let failure = failure.clone();
            device.set_device_lost_callback(move |reason, message| {
                let mut slot = failure.lock().unwrap_or_else(PoisonError::into_inner);
                // The loss replaces an error reported before it: work on a device being lost
                // fails validation, and the loss is what explains that to the user.
                if !matches!(*slot, Some(Error::DeviceLost { .. })) {
                    *slot = Some(Error::DeviceLost {
                        device: label.clone(),
                        reason: if message.is_empty() {
                            format!("{reason:?}")
                        } else {
                            format!("{reason:?}: {message}")
                        },
                    });
                }
            });
        }
        Self(Arc::new(DeviceInner {
            info,
            device,
            queue,
            failure,
            pipelines: Mutex::default(),
            adapter_pipelines,
            gl_lock,
            maintain_lock: Mutex::default(),
            memory: MemoryPool::new(label_for_pool, memory_budget),
            wait_timeout,
            objects: Default::default(),
            unused_storage: Mutex::default(),
        }))
    }

    /// Serialises this adapter's GL work. wgpu's GL backend shares one context per adapter and
    /// panics when a thread waits over 6 s for it (a long shader compile on llvmpipe while other
    /// threads queue up is enough), so gangway's own threads queue here instead, without a timeout.
    /// Not covered: a `wgpu::Buffer` dropped on another thread takes the context directly, so
    /// threads of one process that share a GL adapter can still meet that timeout while one of
    /// them compiles a long shader (the test harness runs GL cases one at a time for this).
    fn serial(&self) -> Option<MutexGuard<'_, ()>> {
        self.0
            .gl_lock
            .as_ref()
            .map(|l| l.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Serialises this device's calls into wgpu-core's `Device::maintain`: polls, and the
    /// maintenance pass at the end of every `Queue::submit`.
    ///
    /// WORKAROUND for a race in wgpu-core 30.0.2 (fixed upstream after it, gfx-rs/wgpu pull
    /// request 9958): `maintain` reads the fence, then triages the queue; when another thread's
    /// `maintain` triages submissions in between, the first finds the queue empty with a stale
    /// fence and panics ("If the queue is empty, the current submission index (80) should be at
    /// least the wait submission index (82)"). Remove this lock, and its uses, once gangway
    /// depends on a wgpu release with the fix; `tests/concurrent_polls.rs` shows whether it is
    /// still needed. Taken after [`Device::serial`], never before it.
    fn maintaining(&self) -> (Option<MutexGuard<'_, ()>>, MutexGuard<'_, ()>) {
        let serial = self.serial();
        let maintain = self
            .0
            .maintain_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (serial, maintain)
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.0.info
    }

    pub fn label(&self) -> String {
        self.0.info.label()
    }

    pub fn id(&self) -> usize {
        self.0.info.id
    }

    /// The underlying wgpu device, for code that builds on gangway.
    pub fn wgpu(&self) -> &wgpu::Device {
        &self.0.device
    }

    pub fn queue(&self) -> &wgpu::Queue {
        &self.0.queue
    }

    pub fn supports(&self, dtype: DType) -> bool {
        match dtype {
            DType::F16 => self.0.info.features.shader_f16,
            DType::F32 | DType::U32 => true,
        }
    }

    /// Errors with [`Error::UnsupportedDType`] when the device cannot compute in `dtype`.
    pub fn require(&self, what: &'static str, dtype: DType) -> Result<()> {
        if self.supports(dtype) {
            Ok(())
        } else {
            Err(Error::UnsupportedDType {
                what,
                dtype,
                device: self.label(),
                feature: "shader-f16",
            })
        }
    }

    /// Returns (and clears) an error wgpu reported asynchronously, such as a lost device.
    pub fn check_health(&self) -> Result<()> {
        let mut slot = self
            .0
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match slot.take() {
            Some(e @ Error::DeviceLost { .. }) => {
                // A lost device stays lost: keep reporting it.
                *slot = Some(e.clone_for_report());
                Err(e)
            }
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// The device's loss when it is lost, else `error`: on a lost device every call fails
    /// validation, and the loss is what explains that to the user.
    fn loss_or(&self, error: Error) -> Error {
        self.loss().unwrap_or(error)
    }

    /// The device's loss, if it is lost; unlike [`Self::check_health`] this clears nothing.
    pub fn loss(&self) -> Option<Error> {
        let slot = self
            .0
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match &*slot {
            Some(lost @ Error::DeviceLost { .. }) => Some(lost.clone_for_report()),
            _ => None,
        }
    }

    /// Checks that one storage binding of `bytes` fits this device.
    pub fn check_storage_size(&self, what: &str, bytes: u64) -> Result<()> {
        let l = &self.0.info.limits;
        let (limit_name, limit) = if l.max_storage_buffer_binding_size < l.max_buffer_size {
            (
                "max_storage_buffer_binding_size",
                l.max_storage_buffer_binding_size,
            )
        } else {
            ("max_buffer_size", l.max_buffer_size)
        };
        if bytes > limit {
            return Err(Error::LimitExceeded {
                what: what.to_string(),
                device: self.label(),
                limit_name,
                requested: bytes,
                limit,
            });
        }
        Ok(())
    }

    /// Checks a dispatch grid against `max_compute_workgroups_per_dimension`.
    pub fn check_workgroups(&self, what: &str, grid: [u32; 3]) -> Result<()> {
        let limit = self.0.info.limits.max_compute_workgroups_per_dimension;
        if let Some(&over) = grid.iter().find(|&&g| g > limit) {
            return Err(Error::LimitExceeded {
                what: format!("{what} dispatch grid {grid:?}"),
                device: self.label(),
                limit_name: "max_compute_workgroups_per_dimension",
                requested: over.into(),
                limit: limit.into(),
            });
        }
        Ok(())
    }

    /// A storage buffer of at least `bytes` (rounded up to 4), checked against the limits.
    pub fn storage_buffer(&self, label: &str, bytes: u64) -> Result<wgpu::Buffer> {
        self.check_storage_size(label, bytes)?;
        self.created();
        let _serial = self.serial();
        Ok(self.0.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded_size(bytes),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    }

    /// A small storage buffer, made once per device, to bind where a kernel's writable binding is
    /// never written by the pipeline at hand (WebGPU wants every binding bound, and a writable
    /// one may not alias another binding of the dispatch). Nothing may read it.
    pub fn unused_storage(&self) -> Result<wgpu::Buffer> {
        let mut slot = (self.0.unused_storage.lock()).unwrap_or_else(PoisonError::into_inner);
        if let Some(buffer) = &*slot {
            return Ok(buffer.clone());
        }
        let buffer = self.storage_buffer("unused writable binding", 16)?;
        *slot = Some(buffer.clone());
        Ok(buffer)
    }

    /// A storage buffer holding `data`, checked against the limits.
    pub fn storage_buffer_init(&self, label: &str, data: &[u8]) -> Result<wgpu::Buffer> {
        let buffer = self.storage_buffer(label, data.len() as u64)?;
        self.write_buffer(&buffer, 0, data);
        Ok(buffer)
    }

    /// A small uniform buffer for kernel parameters.
    pub fn uniform_buffer<T: bytemuck::Pod>(&self, label: &str, value: &T) -> wgpu::Buffer {
        let bytes = bytemuck::bytes_of(value);
        self.created();
        let _serial = self.serial();
        let buffer = self.0.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded_size(bytes.len() as u64).max(16),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.0.queue.write_buffer(&buffer, 0, bytes);
        buffer
    }

    /// Writes bytes at `offset`, padding the tail to wgpu's 4-byte copy alignment.
    pub fn write_buffer(&self, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let _serial = self.serial();
        if data.len().is_multiple_of(4) {
            self.0.queue.write_buffer(buffer, offset, data);
        } else {
            let mut padded = data.to_vec();
            padded.resize(padded_size(data.len() as u64) as usize, 0);
            self.0.queue.write_buffer(buffer, offset, &padded);
        }
    }

    /// Copies `len` bytes at `offset` of a device buffer back to the host (blocking). Waits
    /// only for the copy's own submission, not for work other threads queue after it.
    pub fn read_buffer(&self, buffer: &wgpu::Buffer, offset: u64, len: u64) -> Result<Vec<u8>> {
        let staging = self.readback_buffer("gangway readback", len);
        self.read_through(self.encoder("readback"), buffer, offset, len, &staging)
    }

    /// [`Self::read_buffer`] after the commands already in `encoder` (one submit runs both),
    /// through a readback buffer of the caller's ([`Self::readback_buffer`], at least `len`
    /// bytes), for a caller that reads back again and again.
    pub fn read_through(
        &self,
        mut encoder: wgpu::CommandEncoder,
        buffer: &wgpu::Buffer,
        offset: u64,
        len: u64,
        staging: &wgpu::Buffer,
    ) -> Result<Vec<u8>> {
        if len == 0 {
            self.submit(encoder);
            return Ok(Vec::new());
        }
        let size = padded_size(len);
        if staging.size() < size {
            return Err(Error::InvalidArgument {
                what: "readback",
                reason: format!("a readback buffer of {} bytes for {size}", staging.size()),
            });
        }
        self.serialized(|| encoder.copy_buffer_to_buffer(buffer, offset, staging, 0, size));
        let index = self.submit(encoder);
        let (tx, rx) = std::sync::mpsc::channel();
        self.map_read(staging, move |r| {
            let _ = tx.send(r);
        });
        let start = Instant::now();
        loop {
            self.poll_submission(&index, Duration::from_millis(20))?;
            match rx.try_recv() {
                Ok(mapped) => {
                    mapped?;
                    break;
                }
                Err(std::sync::mpsc::TryRecvError::Empty)
                    if start.elapsed() <= self.0.wait_timeout => {}
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    return Err(Error::Timeout {
                        what: format!("device {} to read back {len} bytes", self.label()),
                        waited_ms: start.elapsed().as_millis() as u64,
                    });
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    return Err(Error::DeviceLost {
                        device: self.label(),
                        reason: "buffer map callback never ran".into(),
                    });
                }
            }
        }
        self.take_mapped(staging, len)
    }

    pub fn encoder(&self, label: &str) -> wgpu::CommandEncoder {
        self.0
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
    }

    pub fn submit(&self, encoder: wgpu::CommandEncoder) -> wgpu::SubmissionIndex {
        self.submit_commands(encoder.finish())
    }

    /// Submits command buffers recorded ahead of time.
    pub fn submit_commands(&self, commands: wgpu::CommandBuffer) -> wgpu::SubmissionIndex {
        self.submit_all(std::iter::once(commands))
    }

    /// Submits several command buffers in one queue submission (one maintenance pass for all).
    pub fn submit_all(
        &self,
        commands: impl IntoIterator<Item = wgpu::CommandBuffer>,
    ) -> wgpu::SubmissionIndex {
        // `Queue::submit` ends with a maintenance pass.
        let _maintaining = self.maintaining();
        self.0.queue.submit(commands)
    }

    /// Blocks until all submitted work finished; reports lost devices and GPU errors, and turns a
    /// wait longer than the device's timeout into [`Error::Timeout`].
    pub fn wait(&self) -> Result<()> {
        self.wait_for(|| format!("device {} to finish its work", self.label()))
    }

    /// [`Device::wait`], naming what was awaited in the timeout error.
    pub fn wait_for(&self, what: impl Fn() -> String) -> Result<()> {
        let start = Instant::now();
        while !self.poll(Duration::from_millis(20))? {
            if start.elapsed() > self.0.wait_timeout {
                return Err(Error::Timeout {
                    what: what(),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
        }
        self.check_health()
    }

    /// Waits up to `slice` for submitted work, running completed callbacks (buffer maps, work
    /// done). True when the queue is empty.
    pub fn poll(&self, slice: Duration) -> Result<bool> {
        self.poll_until(None, slice)
    }

    /// Waits up to `slice` for submission `index` (and what came before it), running completed
    /// callbacks. True when it finished.
    pub fn poll_submission(&self, index: &wgpu::SubmissionIndex, slice: Duration) -> Result<bool> {
        self.poll_until(Some(index.clone()), slice)
    }

    fn poll_until(&self, index: Option<wgpu::SubmissionIndex>, slice: Duration) -> Result<bool> {
        // Short slices: wgpu's GL backend holds the adapter's context lock while it waits, and
        // another thread needing that context panics after 6 s.
        let one = index.is_some();
        let polled = {
            let _maintaining = self.maintaining();
            self.0.device.poll(wgpu::PollType::Wait {
                submission_index: index,
                timeout: Some(slice),
            })
        };
        match polled {
            Ok(status) => {
                self.check_health()?;
                Ok(one || status.is_queue_empty())
            }
            Err(wgpu::PollError::Timeout) => self.check_health().map(|()| false),
            Err(e) => Err(Error::DeviceLost {
                device: self.label(),
                reason: e.to_string(),
            }),
        }
    }

    /// The longest a wait on this device may take.
    pub fn wait_timeout(&self) -> Duration {
        self.0.wait_timeout
    }

    /// GPU objects (buffers, bind groups, query sets, pipelines) this device has created through
    /// gangway, which creates them nowhere else. A compiled program's runs create none once it
    /// has run: what they need is made at compile time or on the first run, and reused.
    pub fn objects_created(&self) -> u64 {
        self.0.objects.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts one created GPU object, here and in the process's total ([`objects_created`]).
    fn created(&self) {
        self.0
            .objects
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        OBJECTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Loses the device on purpose, as a driver reset would: for fault-injection tests.
    pub fn destroy(&self) {
        // wgpu-core calls the device-lost callback of a destroyed device only once its queue is
        // empty, while work already on the queue fails validation at once ("buffer has been
        // destroyed"). Record the loss first, so that every error from here on is explained by
        // it, as it is for a real driver loss (which wgpu reports at once).
        self.0
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(Error::DeviceLost {
                device: self.label(),
                reason: "Destroyed: the device was destroyed (Device::destroy)".into(),
            });
        let _maintaining = self.maintaining();
        self.0.device.destroy();
        // wgpu frees the device's resources in the maintenance pass that finds its queue empty;
        // run one now, in case it already is.
        let _ = self.0.device.poll(wgpu::PollType::Poll);
    }

    /// Reserves `bytes` in this device's memory budget.
    pub fn reserve(&self, bytes: u64, when_full: WhenFull) -> Result<Reservation> {
        self.0.memory.reserve(bytes, when_full)
    }

    pub fn memory(&self) -> MemoryStats {
        self.0.memory.stats()
    }

    /// Whether the driver's compiled pipelines are shared with the adapter's other devices (the
    /// backend has a pipeline cache: Vulkan).
    pub fn shares_pipelines(&self) -> bool {
        self.0.adapter_pipelines.is_some()
    }

    /// The file the adapter's compiled pipelines are kept in between processes, if any (see
    /// [`DiscoveryOptions::pipeline_cache`]).
    pub fn pipeline_cache_file(&self) -> Option<&std::path::Path> {
        self.0.adapter_pipelines.as_ref()?.path()
    }

    /// A compute pipeline for `entry` in `source`, compiled once per device and cached by `key`,
    /// from the process's one parse of `source`. Where the backend has a pipeline cache, the driver compiles with the one its adapter's
    /// devices share (see `pipeline_cache.rs`). With `zero_workgroup_memory` off, the shader must write every workgroup element before it
    /// reads it (see [`crate::kernels::Shader::zero_workgroup_memory`]).
    ///
    /// Shader compilation errors come back as [`Error::Shader`] rather than a panic; an entry
    /// point that needs more than the device's limits give is [`Error::LimitExceeded`] naming
    /// the limit ([`KernelNeeds`], read once per process for each `key` and `entry`).
    pub fn pipeline(
        &self,
        key: &str,
        entry: &str,
        zero_workgroup_memory: bool,
        source: impl FnOnce() -> String,
    ) -> Result<wgpu::ComputePipeline> {
        let cache_key = format!("{key}::{entry}");
        let mut pipelines = self
            .0
            .pipelines
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = pipelines.compiled.get(&cache_key) {
            return Ok(p.clone());
        }
        let _serial = self.serial();
        let scope = self
            .0
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let source = source();
        // wgpu checks storage buffers and invocations but not workgroup memory: a kernel past
        // the device's limit would fail in the driver, or worse. Check all of them first.
        needs::cached(&cache_key, &source, entry)?.check(
            &cache_key,
            &self.label(),
            &self.0.info.limits,
        )?;
        let driver_cache = (self.0.adapter_pipelines.as_ref())
            .map(|adapter| adapter.cache(&self.0.device, &mut pipelines.cache));
        // The text's one parse in this process (the needs above read it too).
        let parsed = parsed::module(&source).map_err(|message| Error::Shader {
            shader: cache_key.clone(),
            message,
        })?;
        let module = self
            .0
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(key),
                source: wgpu::ShaderSource::Naga(std::borrow::Cow::Owned(naga::Module::clone(
                    &parsed,
                ))),
            });
        let pipeline = self
            .0
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(&cache_key),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: wgpu::PipelineCompilationOptions {
                    zero_initialize_workgroup_memory: zero_workgroup_memory,
                    ..Default::default()
                },
                cache: driver_cache.as_ref(),
            });
        if let Some(err) = pollster::block_on(scope.pop()) {
            return Err(self.loss_or(Error::Shader {
                shader: cache_key,
                message: err.to_string(),
            }));
        }
        if let Some(adapter) = &self.0.adapter_pipelines {
            adapter.added(&mut pipelines.cache);
        }
        self.created();
        pipelines.compiled.insert(cache_key, pipeline.clone());
        Ok(pipeline)
    }

    /// Records one compute dispatch of `pipeline` with `(binding, buffer)` pairs in group 0.
    pub fn encode_dispatch<R: Recorder + ?Sized>(
        &self,
        encoder: &mut R,
        label: &str,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
        grid: [u32; 3],
    ) -> Result<()> {
        self.check_workgroups(label, grid)?;
        if grid.contains(&0) {
            return Ok(());
        }
        let bind_group = self.bind_group(label, pipeline, buffers);
        encoder.dispatch(label, pipeline, bind_group, buffers, grid);
        Ok(())
    }

    /// A bind group for group 0 of `pipeline`: made once and reused by compiled programs.
    fn bind_group(
        &self,
        label: &str,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[(u32, &wgpu::Buffer)],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .map(|&(binding, b)| wgpu::BindGroupEntry {
                binding,
                resource: b.as_entire_binding(),
            })
            .collect();
        self.created();
        let _serial = self.serial();
        self.0.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(label),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }

    /// A buffer the host can map to read results back.
    pub fn readback_buffer(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.created();
        let _serial = self.serial();
        self.0.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: padded_size(bytes),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// Starts mapping a readback buffer; `done` runs (inside a later [`Device::poll`]) with the
    /// outcome.
    pub fn map_read(
        &self,
        buffer: &wgpu::Buffer,
        done: impl FnOnce(std::result::Result<(), wgpu::BufferAsyncError>) + Send + 'static,
    ) {
        let _serial = self.serial();
        buffer.map_async(wgpu::MapMode::Read, .., done);
    }

    /// Copies the first `len` bytes out of a mapped readback buffer and unmaps it.
    pub fn take_mapped(&self, buffer: &wgpu::Buffer, len: u64) -> Result<Vec<u8>> {
        let _serial = self.serial();
        let view = buffer.get_mapped_range(..).map_err(|e| {
            // A buffer of a device destroyed meanwhile fails validation here.
            self.loss_or(Error::Gpu {
                what: "readback".into(),
                message: e.to_string(),
            })
        })?;
        let out = view[..len as usize].to_vec();
        drop(view);
        buffer.unmap();
        Ok(out)
    }

    /// Runs `f` with this adapter's GL context serialised (a no-op lock on other backends), for
    /// wgpu calls gangway's helpers do not wrap.
    pub fn serialized<T>(&self, f: impl FnOnce() -> T) -> T {
        let _serial = self.serial();
        f()
    }

    /// A buffer timestamp queries are resolved into (and copied out of): `bytes`, 8 per query.
    pub fn query_resolve_buffer(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.created();
        let _serial = self.serial();
        self.0.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// A timestamp query set of `count` queries, when the device has timestamp queries.
    pub fn timestamp_queries(&self, label: &str, count: u32) -> Option<wgpu::QuerySet> {
        (self.0.info.features.timestamp_query && count > 0).then(|| {
            self.created();
            let _serial = self.serial();
            self.0.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some(label),
                ty: wgpu::QueryType::Timestamp,
                count,
            })
        })
    }
}

/// Records an empty compute pass that only writes timestamps: `begin` at its start and `end` at its
/// end. Brackets work recorded between two such passes (or calibrates a clock).
pub fn timestamp_pass(
    encoder: &mut wgpu::CommandEncoder,
    query_set: &wgpu::QuerySet,
    begin: Option<u32>,
    end: Option<u32>,
) {
    drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some("timestamps"),
        timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
            query_set,
            beginning_of_pass_write_index: begin,
            end_of_pass_write_index: end,
        }),
    }));
}

/// Where kernels record their commands: a live [`wgpu::CommandEncoder`], or a
/// [`crate::kernels::Prepared`] that keeps them (bind groups and all) to be replayed by every run of
/// a compiled program. Each kernel's launcher records against this trait, so one launcher serves
/// both.
pub trait Recorder {
    /// One compute dispatch; `buffers` are what `bind_group` binds (kept alive by recorders that
    /// replay).
    fn dispatch(
        &mut self,
        label: &str,
        pipeline: &wgpu::ComputePipeline,
        bind_group: wgpu::BindGroup,
        buffers: &[(u32, &wgpu::Buffer)],
        grid: [u32; 3],
    );
    fn clear_buffer(&mut self, buffer: &wgpu::Buffer, offset: u64, size: Option<u64>);
    fn copy_buffer_to_buffer(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    );
}

impl Recorder for wgpu::CommandEncoder {
    fn dispatch(
        &mut self,
        label: &str,
        pipeline: &wgpu::ComputePipeline,
        bind_group: wgpu::BindGroup,
        _buffers: &[(u32, &wgpu::Buffer)],
        grid: [u32; 3],
    ) {
        encode_pass(self, label, pipeline, &bind_group, grid, None);
    }

    fn clear_buffer(&mut self, buffer: &wgpu::Buffer, offset: u64, size: Option<u64>) {
        wgpu::CommandEncoder::clear_buffer(self, buffer, offset, size);
    }

    fn copy_buffer_to_buffer(
        &mut self,
        src: &wgpu::Buffer,
        src_offset: u64,
        dst: &wgpu::Buffer,
        dst_offset: u64,
        size: u64,
    ) {
        wgpu::CommandEncoder::copy_buffer_to_buffer(self, src, src_offset, dst, dst_offset, size);
    }
}

/// Kernel launches this process has recorded (compute dispatches, live or replayed).
static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Kernel launches this process has recorded so far: every compute dispatch, into a live encoder
/// or replayed from a compiled program's commands. What `gangway bench` counts per run.
pub fn launches() -> u64 {
    LAUNCHES.load(std::sync::atomic::Ordering::Relaxed)
}

/// GPU objects every device of this process has created ([`Device::objects_created`]).
static OBJECTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// GPU objects (buffers, bind groups, query sets, pipelines) this process's devices have created
/// so far. What `gangway bench` counts per run, where a steady state creates none.
pub fn objects_created() -> u64 {
    OBJECTS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Where one pass writes GPU timestamps: the query set, and the indices written at the pass's
/// beginning and end (either may be `None`).
pub type PassTimestamps<'a> = (&'a wgpu::QuerySet, Option<u32>, Option<u32>);

/// Records one compute pass: `pipeline` with `bind_group` over `grid`, writing the timestamps
/// asked for. The one place gangway records a dispatch, so [`launches`] counts them all.
pub fn encode_pass(
    encoder: &mut wgpu::CommandEncoder,
    label: &str,
    pipeline: &wgpu::ComputePipeline,
    bind_group: &wgpu::BindGroup,
    grid: [u32; 3],
    timestamps: Option<PassTimestamps<'_>>,
) {
    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
        label: Some(label),
        // A pass that writes neither end takes no query set (wgpu refuses writes without an
        // index).
        timestamp_writes: timestamps
            .filter(|(_, begin, end)| begin.is_some() || end.is_some())
            .map(|(query_set, begin, end)| wgpu::ComputePassTimestampWrites {
                query_set,
                beginning_of_pass_write_index: begin,
                end_of_pass_write_index: end,
            }),
    });
    pass.set_pipeline(pipeline);
    pass.set_bind_group(0, bind_group, &[]);
    if !grid.contains(&0) {
        pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Rounds a byte size up to wgpu's 4-byte copy alignment (and at least 4).
pub(crate) fn padded_size(bytes: u64) -> u64 {
    bytes.div_ceil(wgpu::COPY_BUFFER_ALIGNMENT).max(1) * wgpu::COPY_BUFFER_ALIGNMENT
}
