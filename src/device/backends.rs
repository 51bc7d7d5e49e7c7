//! Parsing backend names the way wgpu's `WGPU_BACKEND` does, but strictly: an unknown name is an error.

use crate::{Error, Result};

/// Parses a comma list such as `vulkan,gl` into wgpu backends.
///
/// Accepts the names wgpu accepts (case-insensitive, whitespace ignored): `vulkan`/`vk`, `metal`/`mtl`,
/// `dx12`/`d3d12`, `gl`/`gles`/`opengl`, plus `all`.
pub fn parse_backends(list: &str) -> Result<wgpu::Backends> {
    let mut backends = wgpu::Backends::empty();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        backends |= match name.to_ascii_lowercase().as_str() {
            "vulkan" | "vk" => wgpu::Backends::VULKAN,
            "metal" | "mtl" => wgpu::Backends::METAL,
            "dx12" | "d3d12" => wgpu::Backends::DX12,
            "gl" | "gles" | "opengl" => wgpu::Backends::GL,
            "all" => wgpu::Backends::all(),
            _ => {
                return Err(Error::UnknownBackend {
                    name: name.to_string(),
                });
            }
        };
    }
    if backends.is_empty() {
        return Err(Error::UnknownBackend {
            name: list.to_string(),
        });
    }
    Ok(backends)
}

/// Human-readable list of the backends in a set, e.g. `vulkan,gl`.
pub fn backends_to_string(backends: wgpu::Backends) -> String {
    let names = [
        (wgpu::Backends::VULKAN, "vulkan"),
        (wgpu::Backends::METAL, "metal"),
        (wgpu::Backends::DX12, "dx12"),
        (wgpu::Backends::GL, "gl"),
    ];
    names
        .iter()
        .filter(|(b, _)| backends.contains(*b))
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wgpu_names() {
        assert_eq!(
            parse_backends("Vulkan, gl").unwrap(),
            wgpu::Backends::VULKAN | wgpu::Backends::GL
        );
        assert_eq!(parse_backends("mtl").unwrap(), wgpu::Backends::METAL);
        assert_eq!(
            backends_to_string(parse_backends("vk,dx12").unwrap()),
            "vulkan,dx12"
        );
    }

    #[test]
    fn unknown_backend_is_an_error() {
        let err = parse_backends("vulkan,cuda").unwrap_err();
        assert!(matches!(err, Error::UnknownBackend { ref name } if name == "cuda"));
        assert!(parse_backends(" , ").is_err());
    }
}
