//! What a trace's lane stands for, as a type: a lane is an [`Event::device`] and a Chrome
//! trace's process, and it may be a device, a pipeline stage on its own device, a device holding
//! several folded stages, or a gang of devices holding them (MoE stages), on one rank of a job
//! or another.
//!
//! The Chrome exporter writes a [`Track`] into its process's metadata args beside the name
//! (`"args": {"name": "stage 2: lavapipe", "track": {"kind": "stage", "stages": [2]}}`; Perfetto
//! and chrome://tracing show the name and ignore the rest), and the import reads it back, so a
//! reader titles lanes by [`Track::kind`] and never parses [`Track::label`], which is for
//! people only.
//!
//! [`Event::device`]: super::Event::device

use serde::{Deserialize, Serialize};

/// What a lane is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrackKind {
    /// A device (with folded pipeline stages, each in [`Track::stages`]).
    Device,
    /// A pipeline stage with a device (or a gang) of its own: the textbook's lane.
    Stage,
    /// A gang of devices holding folded pipeline stages (MoE stages on pairs of devices).
    Gang,
}

impl TrackKind {
    pub const ALL: [TrackKind; 3] = [TrackKind::Device, TrackKind::Stage, TrackKind::Gang];

    /// The word lanes of this kind are titled by: "device", "stage", "gang".
    pub const fn word(self) -> &'static str {
        match self {
            TrackKind::Device => "device",
            TrackKind::Stage => "stage",
            TrackKind::Gang => "gang",
        }
    }

    /// The lanes of a pipeline's timeline: its devices when stages share them (folded), else its
    /// stages.
    pub const fn of_pipeline(folded: bool) -> TrackKind {
        if folded {
            TrackKind::Device
        } else {
            TrackKind::Stage
        }
    }

    /// The kind a [`TrackKind::word`] names.
    pub fn of_word(word: &str) -> Option<TrackKind> {
        Self::ALL.into_iter().find(|k| k.word() == word)
    }
}

/// One lane of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Track {
    /// The lane: its events' [`Event::device`](super::Event::device), the Chrome `pid`.
    pub id: usize,
    pub kind: TrackKind,
    /// The pipeline stages it runs, in order: one for a [`TrackKind::Stage`], those folded onto
    /// it for a device or a gang; none outside a pipeline.
    pub stages: Vec<usize>,
    /// The rank of the job it is on, in a trace of several ranks.
    pub rank: Option<usize>,
    /// What people read ("stage 2: llvmpipe (vulkan) #1"); nothing reads meaning out of it.
    pub label: String,
}

impl Track {
    /// A device's lane.
    pub fn device(id: usize, label: impl Into<String>) -> Track {
        Track {
            id,
            kind: TrackKind::Device,
            stages: Vec::new(),
            rank: None,
            label: label.into(),
        }
    }

    /// A lane of `kind` running `stages`.
    pub fn holding(
        id: usize,
        kind: TrackKind,
        stages: Vec<usize>,
        label: impl Into<String>,
    ) -> Track {
        Track {
            id,
            kind,
            stages,
            rank: None,
            label: label.into(),
        }
    }

    /// The lane of a device nothing named: "device N".
    pub fn unnamed(id: usize) -> Track {
        Track::device(id, format!("device {id}"))
    }
}

/// What a trace's lanes are, to title them by: their first's kind (a stage when there is none,
/// a pipeline's textbook lane).
pub fn kind_of(tracks: &[Track]) -> TrackKind {
    tracks.first().map_or(TrackKind::Stage, |t| t.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_have_words_and_back() {
        for k in TrackKind::ALL {
            assert_eq!(TrackKind::of_word(k.word()), Some(k));
        }
        assert_eq!(TrackKind::of_word("rank"), None);
        let folded = Track::holding(
            1,
            TrackKind::Gang,
            vec![1, 3],
            "gang 1 (stages 1, 3): a + b",
        );
        assert_eq!(kind_of(&[folded]).word(), "gang");
        assert_eq!(kind_of(&[]), TrackKind::Stage);
        assert_eq!(Track::unnamed(4).label, "device 4");
    }
}
