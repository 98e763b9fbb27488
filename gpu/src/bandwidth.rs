//! Memory bandwidth of a device: the ceiling that the kernels' effective bandwidth is a fraction
//! of.
//!
//! **What "fraction of memory bandwidth" means here.** A kernel's effective bandwidth is the
//! bytes it must move (counted by the caller: e.g. a validated row is read from the cache and
//! written into the batch, `2 × width × 4` bytes) over its time on the stream. Its fraction is
//! that over the **device-to-device copy measured in the same run** ([`measure_d2d_copy`]: the
//! better of `cuMemcpyDtoD` and a float4 copy kernel, read + write bytes, on buffers far larger
//! than the L2 cache). The copy is what this card's memory delivers to a streaming kernel at its
//! present clocks, so the fraction says how far the kernel is from the best it could do. The
//! card's rated figure ([`rated_gbps`]: memory clock × bus width × 2 transfers per clock, read
//! from the device's attributes) is printed beside it when the driver reports both attributes;
//! no kernel reaches it (a copy typically gets 80–90% of it), so a fraction of it is lower.

use crate::GpuError;
use crate::cuda_context::Gpu;
use crate::kernels;
use cudarc::driver::sys::{CUdevice_attribute, CUevent_flags};
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Gigabytes (10⁹ bytes) per second of `bytes` moved in `ms` milliseconds.
///
/// ```
/// assert_eq!(ordo_gpu::bandwidth::gbps(2e9, 1000.0), 2.0);
/// ```
pub fn gbps(bytes: f64, ms: f64) -> f64 {
    bytes / (ms * 1e-3) / 1e9
}

/// The rated bandwidth in GB/s of a memory whose clock is `memory_clock_khz` and whose bus is
/// `bus_width_bits` wide, at two transfers per clock (DDR, HBM); `None` when either is not
/// positive (a driver that does not report it).
///
/// ```
/// // An H100 SXM's HBM3: 2619 MHz, 5120 bits → 3352 GB/s (its data sheet says 3.35 TB/s).
/// let rated = ordo_gpu::bandwidth::rated_gbps(2_619_000, 5120).unwrap();
/// assert!((rated - 3352.32).abs() < 0.01);
/// assert_eq!(ordo_gpu::bandwidth::rated_gbps(0, 5120), None);
/// ```
pub fn rated_gbps(memory_clock_khz: i32, bus_width_bits: i32) -> Option<f64> {
    (memory_clock_khz > 0 && bus_width_bits > 0)
        .then(|| 2.0 * f64::from(memory_clock_khz) * 1e3 * f64::from(bus_width_bits) / 8.0 / 1e9)
}

/// The device's rated memory bandwidth ([`rated_gbps`] of its memory clock and bus width
/// attributes), or `None` when the driver does not report them (recent drivers may not report
/// the memory clock).
pub fn device_rated_gbps(gpu: &Gpu) -> Option<f64> {
    let ctx = gpu.context();
    let clock = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE).ok()?;
    let bus =
        ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH).ok()?;
    rated_gbps(clock, bus)
}

/// Milliseconds between two events recorded on `stream` around the work `f` queues on it.
pub fn elapsed_ms(
    gpu: &Gpu,
    stream: &Arc<CudaStream>,
    f: impl FnOnce() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let (start, end): (CudaEvent, CudaEvent) =
        (gpu.context().new_event(flags)?, gpu.context().new_event(flags)?);
    start.record(stream)?;
    f()?;
    end.record(stream)?;
    Ok(f64::from(start.elapsed_ms(&end)?))
}

/// A device-to-device copy measured on the device: the denominator of the kernels' fraction of
/// memory bandwidth (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct D2dCopy {
    /// Bytes of each buffer (the copy reads and writes this many bytes per repetition).
    pub bytes: usize,
    /// `cuMemcpyDtoD`, read + write bytes, GB/s.
    pub memcpy_gbps: f64,
    /// A grid-stride float4 copy kernel (`copy_f32` of `bench.cu`), read + write bytes, GB/s.
    pub kernel_gbps: f64,
}

impl D2dCopy {
    /// The better of the two copies: what a streaming kernel can get from this memory.
    pub fn ceiling_gbps(&self) -> f64 {
        self.memcpy_gbps.max(self.kernel_gbps)
    }

    /// `achieved_gbps` as a fraction of [`D2dCopy::ceiling_gbps`].
    pub fn fraction(&self, achieved_gbps: f64) -> f64 {
        achieved_gbps / self.ceiling_gbps()
    }
}

/// Measure a device-to-device copy of two `mib`-MiB buffers (at least 1 MiB), `reps` times each
/// way (at least once) after one warm-up copy, timed by events on a new stream.
pub fn measure_d2d_copy(gpu: &Gpu, mib: usize, reps: usize) -> Result<D2dCopy, GpuError> {
    let (mib, reps) = (mib.max(1), reps.max(1));
    let s = gpu.new_stream()?;
    // A multiple of 4 floats, so the float4 kernel copies every byte.
    let n = mib * (1 << 20) / 4;
    let src: CudaSlice<f32> = s.alloc_zeros(n)?;
    let mut dst: CudaSlice<f32> = s.alloc_zeros(n)?;
    // Read + write.
    let moved = (2 * n * 4 * reps) as f64;

    s.memcpy_dtod(&src, &mut dst)?;
    let ms = elapsed_ms(gpu, &s, || {
        for _ in 0..reps {
            s.memcpy_dtod(&src, &mut dst)?;
        }
        Ok(())
    })?;
    let memcpy_gbps = gbps(moved, ms);

    let f = kernels::load(gpu, "bench.cu", kernels::BENCH_SRC, &kernels::BENCH_KERNELS)?;
    let n4 = (n / 4) as u64;
    let cfg = LaunchConfig { grid_dim: (1024, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
    let launch_copy = |dst: &mut CudaSlice<f32>| -> Result<(), GpuError> {
        let mut l = s.launch_builder(&f[0]);
        l.arg(&src).arg(dst).arg(&n4);
        // SAFETY: `copy_f32(const float4*, float4*, n4)`: both buffers hold 4·n4 floats.
        unsafe { l.launch(cfg) }?;
        Ok(())
    };
    launch_copy(&mut dst)?;
    let ms = elapsed_ms(gpu, &s, || {
        for _ in 0..reps {
            launch_copy(&mut dst)?;
        }
        Ok(())
    })?;
    Ok(D2dCopy { bytes: n * 4, memcpy_gbps, kernel_gbps: gbps(moved, ms) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rated_bandwidth_is_two_transfers_per_clock_over_the_bus() {
        // An RTX 4090's GDDR6X as the driver reports it: 10501 MHz, 384 bits → 1008 GB/s.
        assert!((rated_gbps(10_501_000, 384).unwrap() - 1008.096).abs() < 1e-6);
        assert_eq!(rated_gbps(2_619_000, 0), None);
        assert_eq!(rated_gbps(-1, 5120), None);
    }

    #[test]
    fn fraction_is_of_the_better_copy() {
        let c = D2dCopy { bytes: 1 << 30, memcpy_gbps: 2000.0, kernel_gbps: 2500.0 };
        assert_eq!(c.ceiling_gbps(), 2500.0);
        assert_eq!(c.fraction(1250.0), 0.5);
        let c = D2dCopy { kernel_gbps: 1000.0, ..c };
        assert_eq!(c.fraction(1000.0), 0.5);
        assert_eq!(gbps(1e9, 500.0), 2.0);
    }
}
