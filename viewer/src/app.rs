//! The whole app: a tab bar, a banner when real runs are off, and one panel per tab.

use egui::{RichText, Ui};

use crate::bubble_lab::BubbleLab;
use crate::devices_panel;
use crate::dispatch_compare::DispatchCompare;
use crate::files::FilesTab;
use crate::live::{DeviceHub, Discovery};
use crate::live_view::LiveView;
use crate::moe_panel::MoePanel;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    BubbleLab,
    Live,
    Devices,
    Dispatch,
    Files,
    Moe,
}

impl Tab {
    pub const ALL: [Tab; 6] = [
        Tab::BubbleLab,
        Tab::Live,
        Tab::Devices,
        Tab::Dispatch,
        Tab::Files,
        Tab::Moe,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::BubbleLab => "Bubble lab",
            Tab::Live => "Live timeline",
            Tab::Devices => "Devices",
            Tab::Dispatch => "Dispatch comparison",
            Tab::Moe => "MoE training",
            Tab::Files => "Files",
        }
    }
}

/// How the app starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Look for adapters (off: simulator only, as on a machine without any).
    pub discover: bool,
    /// Start the live workload as soon as devices are found.
    pub autostart_live: bool,
    /// Devices made from each adapter (`--virtual-devices`); `None`: `GANGWAY_VIRTUAL_DEVICES`,
    /// else 1.
    pub virtual_devices: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            discover: true,
            autostart_live: true,
            virtual_devices: None,
        }
    }
}

#[derive(Debug)]
pub struct ViewerApp {
    pub tab: Tab,
    pub hub: DeviceHub,
    pub lab: BubbleLab,
    pub live: LiveView,
    pub compare: DispatchCompare,
    pub moe: MoePanel,
    pub files: FilesTab,
    options: Options,
}

impl ViewerApp {
    pub fn new(options: Options, ctx: Option<egui::Context>) -> Self {
        let hub = if options.discover {
            DeviceHub::discover_with(ctx, options.virtual_devices)
        } else {
            DeviceHub::disabled("device discovery is off (--no-devices)")
        };
        Self {
            tab: Tab::BubbleLab,
            hub,
            lab: BubbleLab::default(),
            live: LiveView::default(),
            compare: DispatchCompare::default(),
            moe: MoePanel::default(),
            files: FilesTab::default(),
            options,
        }
    }

    /// Why real runs are off, if they are.
    pub fn banner(&self) -> Option<String> {
        match self.hub.get() {
            Discovery::Unavailable(why) => Some(format!(
                "Real runs are off: {why}. The bubble lab runs on the simulator; opening files \
                 works."
            )),
            _ => None,
        }
    }

    /// Draws the whole app into `ui`.
    pub fn show(&mut self, ui: &mut Ui) {
        if self.options.autostart_live && self.live.runner.is_none() && self.live.error.is_none() {
            self.live.start(&self.hub, Some(ui.ctx().clone()));
        }
        // The comparison measures dispatch, the lab's run measures its bubble and MoE training
        // measures tokens/s: keep the live workload off the devices meanwhile.
        self.lab.poll();
        self.moe.trace_to = Some(self.live.tracer());
        self.moe.poll();
        if let Some(r) = &self.live.runner {
            r.hold.store(
                self.compare.is_running() || self.lab.is_running() || self.moe.is_running(),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        self.live.poll();

        egui::Panel::top("tabs").show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new("gangway").strong());
                for tab in Tab::ALL {
                    ui.selectable_value(&mut self.tab, tab, tab.title());
                }
            });
            match (self.banner(), self.hub.get()) {
                (Some(b), _) => {
                    ui.colored_label(ui.visuals().warn_fg_color, b);
                }
                (None, Discovery::Pending) => {
                    ui.weak("looking for adapters...");
                    ui.ctx()
                        .request_repaint_after(std::time::Duration::from_millis(200));
                }
                (None, _) => {}
            }
        });
        egui::CentralPanel::default_margins().show(ui, |ui| match self.tab {
            Tab::BubbleLab => {
                egui::ScrollArea::vertical().show(ui, |ui| self.lab.ui(ui, &self.hub));
            }
            Tab::Live => self.live.ui(ui, &self.hub),
            Tab::Devices => devices_panel::ui(ui, &self.hub, &self.live),
            Tab::Dispatch => {
                egui::ScrollArea::vertical().show(ui, |ui| self.compare.ui(ui, &self.hub));
            }
            Tab::Moe => {
                egui::ScrollArea::vertical().show(ui, |ui| self.moe.ui(ui, &self.hub));
            }
            Tab::Files => {
                let lab = self.lab.result.as_ref().ok().map(|r| &r.data);
                self.files.ui(ui, &self.live.data, lab);
            }
        });
    }
}

impl eframe::App for ViewerApp {
    fn ui(&mut self, ui: &mut Ui, _frame: &mut eframe::Frame) {
        self.show(ui);
    }
}
