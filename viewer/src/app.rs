//! The whole app: a tab bar, a banner when real runs are off, and one panel per tab.

use std::path::PathBuf;

use egui::{Key, RichText, Ui};
use gangway::pipeline::figure::Theme;
use serde::{Deserialize, Serialize};

use crate::attach_view::AttachTab;
use crate::bubble_lab::BubbleLab;
use crate::devices_panel;
use crate::dispatch_compare::DispatchCompare;
use crate::files::FilesTab;
use crate::frame_stats::FrameStats;
use crate::live::{DeviceHub, Discovery};
use crate::live_view::{LiveView, Workload};
use crate::moe_panel::MoePanel;
use crate::pace::{self, FramePace, PaceMeter};
use crate::{fonts, theme};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    BubbleLab,
    Live,
    Devices,
    Dispatch,
    Files,
    Moe,
    Attached,
}

impl Tab {
    pub const ALL: [Tab; 7] = [
        Tab::BubbleLab,
        Tab::Live,
        Tab::Devices,
        Tab::Dispatch,
        Tab::Files,
        Tab::Moe,
        Tab::Attached,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::BubbleLab => "Bubble lab",
            Tab::Live => "Live timeline",
            Tab::Devices => "Devices",
            Tab::Dispatch => "Dispatch comparison",
            Tab::Moe => "MoE training",
            Tab::Files => "Files",
            Tab::Attached => "Attached",
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
    /// Print frame-rate statistics to stderr about once a second while frames are drawn
    /// (`--frame-stats`).
    pub frame_stats: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            discover: true,
            autostart_live: true,
            virtual_devices: None,
            frame_stats: false,
        }
    }
}

/// What the app remembers between launches (eframe's storage, under [`SETTINGS_KEY`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// The projector theme: light background, large type, thick blocks. `P` toggles it.
    pub projector: bool,
    /// Files opened lately, newest first.
    pub recent: Vec<PathBuf>,
    /// Addresses of jobs attached to lately (HOST:PORT), newest first; never their tokens.
    pub recent_attach: Vec<String>,
}

/// The storage key of [`Settings`].
pub const SETTINGS_KEY: &str = "gangway-viewer-settings";

#[derive(Debug)]
pub struct ViewerApp {
    pub tab: Tab,
    pub hub: DeviceHub,
    pub lab: BubbleLab,
    pub live: LiveView,
    pub compare: DispatchCompare,
    pub moe: MoePanel,
    pub files: FilesTab,
    /// Jobs of other processes followed over the live protocol.
    pub attached: AttachTab,
    pub settings: Settings,
    /// The theme last applied to the context (`Some(projector)`), so it is set on change only.
    applied_theme: Option<bool>,
    frame_stats: Option<FrameStats>,
    /// Sets the window's [`FramePace`] from what its frames cost (in a real window only: a test
    /// harness's frames are not the window's).
    pace: PaceMeter,
}

impl ViewerApp {
    pub fn new(options: Options, ctx: Option<egui::Context>) -> Self {
        let hub = if options.discover {
            DeviceHub::discover_with(ctx, options.virtual_devices)
        } else {
            DeviceHub::disabled("device discovery is off (--no-devices)")
        };
        let mut live = LiveView::default();
        if !options.autostart_live {
            live.workload = Workload::Off;
        }
        Self {
            tab: Tab::BubbleLab,
            hub,
            lab: BubbleLab::default(),
            live,
            compare: DispatchCompare::default(),
            moe: MoePanel::default(),
            files: FilesTab::default(),
            attached: AttachTab::default(),
            settings: Settings::default(),
            applied_theme: None,
            frame_stats: options.frame_stats.then(FrameStats::default),
            pace: PaceMeter::default(),
        }
    }

    /// Takes the settings saved by the last launch, if any could be read (an unreadable entry is
    /// ignored: the defaults are used).
    pub fn restore(&mut self, storage: &dyn eframe::Storage) {
        if let Some(saved) = storage
            .get_string(SETTINGS_KEY)
            .and_then(|s| serde_json::from_str::<Settings>(&s).ok())
        {
            self.settings = saved;
        }
        self.files.set_recent(self.settings.recent.clone());
        self.attached
            .set_recent(self.settings.recent_attach.clone());
    }

    /// Follows the job served at `addr` (HOST:PORT) on the Attached tab, with `token` if the
    /// server wants one (`--attach`).
    pub fn attach_to(&mut self, addr: &str, token: Option<String>, ctx: Option<egui::Context>) {
        self.attached.attach(addr, token, ctx);
        self.tab = Tab::Attached;
    }

    /// Opens `path` on the Files tab.
    pub fn open_file(&mut self, path: PathBuf) {
        self.files.path = path.display().to_string();
        self.files.open_path();
        self.tab = Tab::Files;
    }

    /// Fonts, theme and the theme key: once per frame, before anything is laid out.
    fn look(&mut self, ctx: &egui::Context) {
        if self.applied_theme.is_none() {
            // First frame: the font goes in before anything is laid out, once.
            fonts::install(ctx);
        }
        if ctx.input(|i| i.key_pressed(Key::P)) && !ctx.egui_wants_keyboard_input() {
            self.settings.projector = !self.settings.projector;
        }
        if self.applied_theme != Some(self.settings.projector) {
            theme::apply(ctx, self.settings.projector);
            self.applied_theme = Some(self.settings.projector);
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
        self.look(ui.ctx());
        if self.files.handle_dropped(ui.ctx()) {
            self.tab = Tab::Files;
        }
        // The comparison measures dispatch, the lab's run measures its bubble and MoE training
        // measures tokens/s: keep the live workload off the devices meanwhile.
        self.lab.poll();
        self.live.attach(&self.hub, Some(ui.ctx().clone()));
        self.moe.poll();
        if let Some(r) = &self.live.runner {
            r.hold.store(
                self.compare.is_running() || self.lab.is_running() || self.moe.is_running(),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        self.live.poll();
        // Every frame, whatever tab is shown: the readers' channels are drained here.
        self.attached.poll(Some(ui.ctx()));

        egui::Panel::top("tabs").show(ui, |ui| {
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new("gangway").strong());
                for tab in Tab::ALL {
                    ui.selectable_value(&mut self.tab, tab, tab.title());
                }
                ui.separator();
                ui.toggle_value(&mut self.settings.projector, "projector (P)")
                    .on_hover_text("light background and large type, for a projector");
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
        // The live workload runs while a tab showing it is on screen (or the user started it):
        // any other tab leaves the machine idle. After the tab bar, so a click acts this frame.
        let shown = matches!(self.tab, Tab::Live | Tab::Devices);
        self.live.sync(shown, &self.hub, Some(ui.ctx().clone()));
        egui::CentralPanel::default_margins().show(ui, |ui| match self.tab {
            Tab::BubbleLab => {
                let theme = if self.settings.projector {
                    Theme::Projector
                } else {
                    Theme::Screen
                };
                egui::ScrollArea::vertical().show(ui, |ui| self.lab.ui(ui, &self.hub, theme));
            }
            Tab::Live => self.live.ui(ui, &self.hub),
            Tab::Devices => devices_panel::ui(ui, &self.hub, &self.live),
            Tab::Dispatch => {
                egui::ScrollArea::vertical().show(ui, |ui| self.compare.ui(ui, &self.hub));
            }
            Tab::Moe => {
                egui::ScrollArea::vertical().show(ui, |ui| self.moe.ui(ui, &self.hub));
            }
            Tab::Attached => self.attached.ui(ui),
            Tab::Files => {
                let lab = self.lab.result.as_ref().ok().map(|r| &r.data);
                self.files.ui(ui, &self.live.data, lab);
            }
        });
    }
}

impl eframe::App for ViewerApp {
    fn ui(&mut self, ui: &mut Ui, frame: &mut eframe::Frame) {
        if let Some(stats) = &mut self.frame_stats
            && let Some(window) = stats.frame(std::time::Instant::now(), frame.info().cpu_usage)
        {
            eprintln!("{window}");
        }
        let now = std::time::Instant::now();
        self.pace
            .frame(now, pace::process_cpu(), &FramePace::of(Some(ui.ctx())));
        self.show(ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        self.settings.recent = self.files.recent.clone();
        self.settings.recent_attach = self.attached.recent.clone();
        if let Ok(json) = serde_json::to_string(&self.settings) {
            storage.set_string(SETTINGS_KEY, json);
        }
    }
}
