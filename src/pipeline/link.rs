//! Links that pipeline stages talk over, as presets for the cost model's transfer term
//! (`latency + bytes / bandwidth`, [`super::Costs`]): one direction of one device's link, from
//! the vendors' figures, with a typical small-message latency. They are round numbers for
//! teaching and planning, not measurements: measure your own link (`gangway bench scaleout`
//! does over MPI) and pass `--latency-us`/`--bandwidth-gbs` where it matters.

use serde::Serialize;

/// A link preset; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Link {
    /// NVLink 4 (H100/H200): 900 GB/s both ways, 450 one way; about 2 µs.
    Nvlink4,
    /// PCIe 4.0 ×16: about 32 GB/s one way; about 5 µs through the host.
    Pcie4,
    /// PCIe 5.0 ×16: about 64 GB/s one way; about 5 µs.
    Pcie5,
    /// InfiniBand NDR, one 400 Gb/s port: 50 GB/s; about 3 µs.
    InfinibandNdr,
    /// 100 Gb/s Ethernet with RoCE: 12.5 GB/s; about 10 µs.
    Ethernet100g,
    /// 10 Gb/s Ethernet over TCP: 1.25 GB/s; about 50 µs.
    Ethernet10g,
}

impl Link {
    pub const ALL: [Link; 6] = [
        Link::Nvlink4,
        Link::Pcie4,
        Link::Pcie5,
        Link::InfinibandNdr,
        Link::Ethernet100g,
        Link::Ethernet10g,
    ];

    /// The name the command line takes.
    pub fn name(self) -> &'static str {
        match self {
            Link::Nvlink4 => "nvlink4",
            Link::Pcie4 => "pcie4",
            Link::Pcie5 => "pcie5",
            Link::InfinibandNdr => "infiniband-ndr",
            Link::Ethernet100g => "ethernet100g",
            Link::Ethernet10g => "ethernet10g",
        }
    }

    /// Fixed cost of one transfer, µs.
    pub fn latency_us(self) -> f64 {
        match self {
            Link::Nvlink4 => 2.0,
            Link::Pcie4 | Link::Pcie5 => 5.0,
            Link::InfinibandNdr => 3.0,
            Link::Ethernet100g => 10.0,
            Link::Ethernet10g => 50.0,
        }
    }

    /// One direction's bandwidth, GB/s (10⁹ bytes per second, which is bytes per ns).
    pub fn bandwidth_gbs(self) -> f64 {
        match self {
            Link::Nvlink4 => 450.0,
            Link::Pcie4 => 32.0,
            Link::Pcie5 => 64.0,
            Link::InfinibandNdr => 50.0,
            Link::Ethernet100g => 12.5,
            Link::Ethernet10g => 1.25,
        }
    }

    /// The link's cost of one transfer of `bytes`, ns.
    pub fn transfer_ns(self, bytes: u64) -> f64 {
        self.latency_us() * 1e3 + bytes as f64 / self.bandwidth_gbs()
    }
}

impl std::str::FromStr for Link {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Link::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Link::ALL.iter().map(|l| l.name()).collect();
                format!("unknown link {s:?}; one of {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_parse_by_name_and_cost_latency_plus_bytes_over_bandwidth() {
        for link in Link::ALL {
            assert_eq!(link.name().parse::<Link>(), Ok(link));
            assert!(link.latency_us() > 0.0 && link.bandwidth_gbs() > 0.0);
        }
        assert!("nvlink".parse::<Link>().unwrap_err().contains("nvlink4"));
        // 1 MiB over 10 GbE: 50 µs + 1048576 B / 1.25 B/ns.
        let ns = Link::Ethernet10g.transfer_ns(1 << 20);
        assert!((ns - (50_000.0 + 838_860.8)).abs() < 1e-6, "{ns}");
        // Faster links cost less for the same activation.
        assert!(Link::Nvlink4.transfer_ns(1 << 20) < Link::Pcie4.transfer_ns(1 << 20));
    }
}
