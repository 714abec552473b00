//! One OpenCL device in use: its context and in-order queue, the kernel
//! programs (built once per device, on first use, then kept), buffer
//! allocation, transfers and kernel launches. Every launch goes through
//! `Ctx::launch`, which holds the lock that kernel arguments need (a
//! `cl_kernel` keeps its arguments between calls, so two threads must not
//! set them at once).

use std::collections::HashMap;
use std::ptr;
use std::sync::{Arc, Mutex};

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::Device;
use opencl3::kernel::Kernel;
use opencl3::memory::{Buffer as ClBuffer, ClMem as _, CL_MEM_READ_WRITE};
use opencl3::program::Program;
use opencl3::types::{cl_mem, CL_BLOCKING};

use super::device::{cl_err, DeviceInfo};
use super::kernels;
use crate::error::{BackendError, Result};

/// A device allocation (bytes). Dropping the last tensor that views it
/// releases it.
pub struct ClMem {
    pub buf: ClBuffer<u8>,
    pub bytes: usize,
}

impl ClMem {
    pub fn raw(&self) -> cl_mem {
        self.buf.get()
    }
}

/// One kernel argument.
pub enum Arg<'a> {
    Mem(&'a ClMem),
    I32(i32),
    U32(u32),
    F32(f32),
    /// `__local` memory of this many bytes.
    Local(usize),
}

pub struct Ctx {
    pub info: DeviceInfo,
    pub context: Context,
    pub queue: CommandQueue,
    /// Built programs by source name, and their kernels by name; the lock
    /// is also held while a launch sets arguments and enqueues.
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    programs: HashMap<&'static str, Program>,
    kernels: HashMap<&'static str, Kernel>,
}

fn err(op: &'static str, msg: impl Into<String>) -> BackendError {
    BackendError::Invalid {
        op,
        msg: msg.into(),
    }
}

impl Ctx {
    pub fn new(info: DeviceInfo) -> Result<Ctx> {
        let device = Device::new(info.device.id());
        let context = Context::from_device(&device).map_err(|e| cl_err("context", e))?;
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&context, 0).map_err(|e| cl_err("queue", e))?;
        Ok(Ctx {
            info,
            context,
            queue,
            state: Mutex::new(State::default()),
        })
    }

    /// A new uninitialized allocation of `bytes` (at least 1: OpenCL
    /// refuses empty buffers).
    pub fn alloc(&self, bytes: usize) -> Result<Arc<ClMem>> {
        let size = bytes.max(4);
        if size as u64 > self.info.max_alloc {
            return Err(err(
                "alloc",
                format!(
                    "{size} bytes exceed the device's largest allocation ({} bytes) on {}",
                    self.info.max_alloc, self.info.name
                ),
            ));
        }
        // SAFETY: no host pointer is given; the buffer is written before it
        // is read by every caller (kernels write their whole output).
        let buf = unsafe {
            ClBuffer::<u8>::create(&self.context, CL_MEM_READ_WRITE, size, ptr::null_mut())
        }
        .map_err(|e| cl_err("alloc", e))?;
        Ok(Arc::new(ClMem { buf, bytes }))
    }

    /// Copies host bytes into `mem` at byte `offset` (blocking: the host
    /// slice may be freed when this returns).
    pub fn write(&self, mem: &ClMem, offset: usize, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        check_range(mem, offset, data.len())?;
        // SAFETY: the range is inside the buffer; the write is blocking, so
        // `data` outlives it.
        unsafe {
            opencl3::command_queue::enqueue_write_buffer(
                self.queue.get(),
                mem.raw(),
                CL_BLOCKING,
                offset,
                data.len(),
                data.as_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map(release_event)
        .map_err(|e| cl_err("upload", e))
    }

    /// Reads `out.len()` bytes of `mem` from byte `offset` (blocking: waits
    /// for every kernel queued before).
    pub fn read(&self, mem: &ClMem, offset: usize, out: &mut [u8]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        check_range(mem, offset, out.len())?;
        // SAFETY: the range is inside the buffer; the read is blocking.
        unsafe {
            opencl3::command_queue::enqueue_read_buffer(
                self.queue.get(),
                mem.raw(),
                CL_BLOCKING,
                offset,
                out.len(),
                out.as_mut_ptr().cast(),
                0,
                ptr::null(),
            )
        }
        .map(release_event)
        .map_err(|e| cl_err("download", e))
    }

    /// Device-side copy of `bytes` bytes (queued in order).
    pub fn copy(
        &self,
        src: &ClMem,
        src_off: usize,
        dst: &ClMem,
        dst_off: usize,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        check_range(src, src_off, bytes)?;
        check_range(dst, dst_off, bytes)?;
        // SAFETY: both ranges are inside their buffers.
        unsafe {
            opencl3::command_queue::enqueue_copy_buffer(
                self.queue.get(),
                src.raw(),
                dst.raw(),
                src_off,
                dst_off,
                bytes,
                0,
                ptr::null(),
            )
        }
        .map(release_event)
        .map_err(|e| cl_err("copy", e))
    }

    /// Waits for everything queued.
    pub fn finish(&self) -> Result<()> {
        self.queue.finish().map_err(|e| cl_err("finish", e))
    }

    /// Queues kernel `name` (from program `program`) over `global` work
    /// items (1-3 dims) with work-groups of `local` (or the driver's
    /// choice), after rounding each global size up to a multiple of the
    /// local one (kernels bound-check their ids).
    pub fn launch(
        &self,
        program: &'static str,
        name: &'static str,
        global: &[usize],
        local: Option<&[usize]>,
        args: &[Arg],
    ) -> Result<()> {
        if global.contains(&0) {
            return Ok(());
        }
        let mut st = self
            .state
            .lock()
            .map_err(|_| err(name, "a launch panicked"))?;
        if !st.kernels.contains_key(name) {
            if !st.programs.contains_key(program) {
                let p = self.build(program)?;
                st.programs.insert(program, p);
            }
            let p = &st.programs[program];
            let k = Kernel::create(p, name).map_err(|e| {
                err(
                    "opencl",
                    format!("kernel `{name}` is missing from program `{program}`: {e}"),
                )
            })?;
            st.kernels.insert(name, k);
        }
        let k = &st.kernels[name];
        for (i, a) in args.iter().enumerate() {
            let i = i as u32;
            // SAFETY: each argument has the size and kind its kernel
            // declares (kernels and launchers are written together and
            // checked by the conformance tests).
            let r = unsafe {
                match a {
                    Arg::Mem(m) => k.set_arg(i, &m.raw()),
                    Arg::I32(v) => k.set_arg(i, v),
                    Arg::U32(v) => k.set_arg(i, v),
                    Arg::F32(v) => k.set_arg(i, v),
                    Arg::Local(b) => k.set_arg_local_buffer(i, (*b).max(4)),
                }
            };
            r.map_err(|e| cl_err(name, e))?;
        }
        let mut g = [1usize; 3];
        let mut l = [1usize; 3];
        for (d, &n) in global.iter().enumerate() {
            g[d] = n;
            if let Some(loc) = local {
                l[d] = loc[d];
                g[d] = n.div_ceil(l[d]) * l[d];
            }
        }
        // SAFETY: dims match the arrays' lengths; the kernel's arguments
        // are all set above.
        unsafe {
            self.queue.enqueue_nd_range_kernel(
                k.get(),
                global.len() as u32,
                ptr::null(),
                g.as_ptr(),
                if local.is_some() {
                    l.as_ptr()
                } else {
                    ptr::null()
                },
                &[],
            )
        }
        .map(drop)
        .map_err(|e| cl_err(name, e))
    }

    /// Builds every program not built yet (what the first launches would
    /// otherwise do, one by one).
    pub fn build_all(&self) -> Result<()> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| err("opencl", "a launch panicked"))?;
        for &name in kernels::PROGRAMS {
            if !st.programs.contains_key(name) {
                let p = self.build(name)?;
                st.programs.insert(name, p);
            }
        }
        Ok(())
    }

    fn build(&self, program: &'static str) -> Result<Program> {
        let src = kernels::source(program)
            .ok_or_else(|| err("opencl", format!("no kernel program `{program}`")))?;
        let opts = if self.info.fp16 {
            "-cl-std=CL1.2 -DHAS_FP16=1"
        } else {
            "-cl-std=CL1.2 -DHAS_FP16=0"
        };
        let text = format!("{}\n{}", kernels::COMMON, src);
        Program::create_and_build_from_source(&self.context, &text, opts).map_err(|log| {
            err(
                "opencl",
                format!("building `{program}` for {} failed:\n{log}", self.info.name),
            )
        })
    }
}

fn check_range(mem: &ClMem, offset: usize, len: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= mem.bytes.max(4) => Ok(()),
        _ => Err(err(
            "opencl",
            format!(
                "bytes {offset}..{} fall outside a buffer of {} bytes",
                offset.saturating_add(len),
                mem.bytes
            ),
        )),
    }
}

fn release_event(ev: opencl3::types::cl_event) {
    // The queue is in order; nothing waits on individual events.
    let _ = opencl3::event::Event::new(ev);
}
