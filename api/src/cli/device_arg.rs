//! `--device cpu|cuda|auto`: read the same way by every command.

use anyhow::Context;
use candle_core::Device;
use clap::ValueEnum;

/// Where models run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum DeviceArg {
    /// The CPU.
    Cpu,
    /// CUDA device 0 (an error if this build has no CUDA or no GPU answers).
    Cuda,
    /// CUDA when this build supports it and a GPU answers, else the CPU.
    #[default]
    Auto,
}

impl std::str::FromStr for DeviceArg {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        <Self as ValueEnum>::from_str(s, true)
            .map_err(|_| anyhow::anyhow!("`{s}` (expected cpu, cuda or auto)"))
    }
}

impl DeviceArg {
    /// The candle device.
    pub fn device(self) -> anyhow::Result<Device> {
        match self {
            DeviceArg::Cpu => Ok(Device::Cpu),
            DeviceArg::Cuda => Device::new_cuda(0).context(
                "--device cuda: cannot open CUDA device 0 (a CPU build needs `--features cuda`)",
            ),
            DeviceArg::Auto => {
                if !candle_core::utils::cuda_is_available() {
                    return Ok(Device::Cpu);
                }
                // cudarc panics rather than erroring when CUDA libraries are missing.
                match std::panic::catch_unwind(|| Device::new_cuda(0)) {
                    Ok(Ok(dev)) => Ok(dev),
                    _ => Ok(Device::Cpu),
                }
            }
        }
    }
}
