//! The test binaries' `main`: each GPU test becomes one case per adapter (`name::vulkan_lavapipe`,
//! `name::gl_llvmpipe`), run and reported by libtest-mimic as libtest would, so one adapter's
//! failure leaves the others' results standing and `cargo test --test matmul gl` picks one adapter.
//!
//! A case an adapter cannot run (it lacks a [`Need`], or a cross-adapter case has one adapter) is
//! reported `ignored (<reason>)` and listed before the run; it never passes without running.

use super::adapters::{self, Adapter, Adapters, NoAdapters};
use gangway::{DType, Device};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::sync::{Mutex, PoisonError};

/// `case!(device: some_test)`: the [`Case`] that runs `some_test` under its own name, made by
/// [`Case::host`], [`Case::device`] or [`Case::adapters`].
macro_rules! case {
    ($kind:ident: $test:ident) => {
        $crate::common::Case::$kind(stringify!($test), $test)
    };
}
pub(crate) use case;

/// Something a case needs of every adapter it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// f16 in shaders (`shader-f16`, which GL never has).
    F16,
    /// GPU timestamps (`timestamp-query`).
    TimestampQuery,
    /// Virtual devices of one adapter that run at the same time (a GL adapter's share one
    /// context, so gangway runs their work one at a time).
    ConcurrentDevices,
    /// Subgroup operations with subgroups of at least 8 lanes (the subgroup matmul's need).
    Subgroups,
    /// A pipeline cache (wgpu has one on Vulkan only).
    PipelineCache,
}

impl Need {
    /// Why `device` cannot run a case that needs this, if it cannot.
    fn missing(self, device: &Device) -> Option<&'static str> {
        match self {
            Need::F16 => (!device.supports(DType::F16)).then_some("no shader-f16"),
            Need::TimestampQuery => {
                (!device.info().features.timestamp_query).then_some("no timestamp queries")
            }
            Need::ConcurrentDevices => (device.info().backend == "gl")
                .then_some("GL virtual devices share one context and run one at a time"),
            Need::Subgroups => (!device.info().features.subgroups
                || device.info().subgroup_min_size < 8)
                .then_some("no subgroups of 8 lanes or more"),
            Need::PipelineCache => {
                (!device.shares_pipelines()).then_some("no pipeline cache on this backend")
            }
        }
    }
}

/// Which adapters a case runs on, as which trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Span {
    /// `name::<slug>` on each adapter alone (the default).
    Each,
    /// [`Span::Each`], plus `name::cross_adapter` on every adapter at once: for cases whose point
    /// is mixing adapters. Skipped with fewer than 2 adapters, where it would repeat a case.
    EachAndCross,
    /// Only `name::cross_adapter`: the case is about two or more adapters.
    Cross,
    /// One trial `name` on every adapter at once, however many: for tests of the whole machine,
    /// such as the CLI's.
    All,
}

#[derive(Clone, Copy)]
enum Body {
    Host(fn()),
    Device(fn(&Device)),
    Adapters(fn(&Adapters)),
}

/// One test function and how it runs; it fails by panicking, as a `#[test]` does.
pub struct Case {
    name: &'static str,
    body: Body,
    needs: Vec<Need>,
    span: Span,
    /// Run only when asked for (`-- --ignored`), as libtest's `#[ignore]`: long soaks.
    opt_in: bool,
}

impl Case {
    /// A test without a GPU: one trial, whatever adapters exist.
    pub fn host(name: &'static str, test: fn()) -> Self {
        Self::new(name, Body::Host(test))
    }

    /// A test of one device: one trial per adapter, on that adapter's device.
    pub fn device(name: &'static str, test: fn(&Device)) -> Self {
        Self::new(name, Body::Device(test))
    }

    /// A test that takes its own devices from its [`Adapters`] (`mesh(n)`: n virtual devices of
    /// each): one trial per adapter, or as [`Case::span`] says.
    pub fn adapters(name: &'static str, test: fn(&Adapters)) -> Self {
        Self::new(name, Body::Adapters(test))
    }

    fn new(name: &'static str, body: Body) -> Self {
        Self {
            name,
            body,
            needs: Vec::new(),
            span: Span::Each,
            opt_in: false,
        }
    }

    /// Skips the case, saying why, on adapters without `need`.
    pub fn needs(mut self, need: Need) -> Self {
        assert!(
            !matches!(self.body, Body::Host(_)),
            "{}: a host test needs no adapter",
            self.name
        );
        self.needs.push(need);
        self
    }

    /// Runs the case only when asked for, with `-- --ignored` or `-- --include-ignored`.
    pub fn opt_in(mut self) -> Self {
        self.opt_in = true;
        self
    }

    /// Runs the case on the adapters `span` says, as its trials.
    pub fn span(mut self, span: Span) -> Self {
        assert!(
            matches!(self.body, Body::Adapters(_)),
            "{}: only an adapters case spans adapters",
            self.name
        );
        self.span = span;
        self
    }

    /// The trials this case becomes on `found`, each with its plan.
    fn plan(self, found: &'static Result<Vec<Adapter>, NoAdapters>) -> Vec<(String, Plan)> {
        let name = self.name.to_string();
        let body = self.body;
        if let Body::Host(test) = body {
            return vec![(
                name,
                Plan::Run {
                    test: Box::new(test),
                    gl: false,
                },
            )];
        }
        let all = match found {
            Ok(all) => all.iter().collect::<Vec<_>>(),
            Err(e) if e.fatal => return vec![(name, Plan::Fail(e.reason.clone()))],
            Err(e) => return vec![(name, Plan::Skip(format!("no adapter: {}", e.reason)))],
        };
        // (trial name, its adapters, whether it is the cross-adapter trial)
        let each = || {
            all.iter()
                .map(|a| (format!("{name}::{}", a.slug), vec![*a], false))
        };
        let cross = || (format!("{name}::cross_adapter"), all.clone(), true);
        let groups: Vec<_> = match self.span {
            Span::Each => each().collect(),
            Span::EachAndCross => each().chain([cross()]).collect(),
            Span::Cross => vec![cross()],
            Span::All => vec![(name.clone(), all.clone(), false)],
        };
        groups
            .into_iter()
            .map(|(trial, members, is_cross)| {
                let plan = if is_cross && members.len() < 2 {
                    Plan::Skip(format!("needs 2 adapters, found {}", members.len()))
                } else if let Some(reason) = self.unmet(&members) {
                    Plan::Skip(reason)
                } else {
                    let gl = members.iter().any(|a| a.device.info().backend == "gl");
                    let test: Box<dyn FnOnce() + Send> = match body {
                        Body::Device(test) => Box::new(move || test(&members[0].device)),
                        Body::Adapters(test) => Box::new(move || test(&Adapters::new(members))),
                        Body::Host(_) => unreachable!("planned above"),
                    };
                    Plan::Run { test, gl }
                };
                (trial, plan)
            })
            .collect()
    }

    /// Why `members` cannot run this case, naming the adapter when there are several.
    fn unmet(&self, members: &[&Adapter]) -> Option<String> {
        members.iter().find_map(|a| {
            let reason = self.needs.iter().find_map(|n| n.missing(&a.device))?;
            Some(match members {
                [_] => reason.to_string(),
                _ => format!("{reason} on {}", a.slug),
            })
        })
    }
}

/// What a trial does when run.
enum Plan {
    /// `gl`: the trial touches a GL adapter, so it runs while no other such trial does.
    Run {
        test: Box<dyn FnOnce() + Send>,
        gl: bool,
    },
    Skip(String),
    Fail(String),
}

impl Plan {
    fn into_trial(self, name: String) -> Trial {
        match self {
            Plan::Run { test, gl } => {
                let thread = name.clone();
                Trial::test(name, move || {
                    // wgpu's GL backend shares one context per adapter and panics when a thread
                    // waits over 6 s for it. gangway's own calls queue on `Device::serial`, but a
                    // buffer dropped on one trial's thread takes the context directly, and a
                    // shader compile on another can hold it longer than that on llvmpipe under
                    // load (a fresh-clone CI run aborted so). So GL trials take turns.
                    let _turn = gl.then(|| {
                        static GL_TRIALS: Mutex<()> = Mutex::new(());
                        GL_TRIALS.lock().unwrap_or_else(PoisonError::into_inner)
                    });
                    // A thread of its own named after the trial, as libtest gives each test: panics
                    // name their case, and no device work is left on the main thread, whose exit
                    // (with --test-threads=1 libtest-mimic runs trials there) tears Mesa down.
                    let ran = std::thread::Builder::new()
                        .name(thread)
                        .spawn(test)
                        .map_err(|e| format!("cannot start the trial's thread: {e}"))?
                        .join();
                    ran.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                    Ok(())
                })
            }
            Plan::Skip(reason) => {
                Trial::ignorable_test(name, move || Ok(Completion::ignored_with(reason)))
            }
            Plan::Fail(reason) => Trial::test(name, move || Err(Failed::from(reason))),
        }
    }
}

/// Runs `cases` as the command line asks (filters, `--list`, `--test-threads`, ...) and returns
/// libtest's exit code: the body of every GPU test binary's `main`.
pub fn run(cases: Vec<Case>) -> ExitCode {
    let args = Arguments::from_args();
    let found = adapters::found();
    let mut trials = Vec::new();
    let mut skipped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut names = BTreeSet::new();
    for case in cases {
        let opt_in = case.opt_in;
        for (name, plan) in case.plan(found) {
            assert!(names.insert(name.clone()), "two cases named {name}");
            let reason = match &plan {
                Plan::Skip(reason) => Some(reason.clone()),
                _ => None,
            };
            let trial = plan.into_trial(name).with_ignored_flag(opt_in);
            if let Some(reason) = reason.filter(|_| !args.is_filtered_out(&trial)) {
                skipped.entry(reason).or_default().push(trial.name().into());
            }
            trials.push(trial);
        }
    }
    // Before the run, on stderr: libtest's own lines stay the last ones, for tools that read them.
    if !args.list {
        match found {
            Ok(all) => {
                let list: Vec<String> = all
                    .iter()
                    .map(|a| format!("{} = {}", a.slug, a.device.label()))
                    .collect();
                eprintln!("adapters: {}", list.join(", "));
            }
            Err(e) if e.fatal => eprintln!("GPU cases FAIL: {}", e.reason),
            // The skips below say why.
            Err(_) => {}
        }
        for (reason, names) in &skipped {
            eprintln!("skipping ({reason}): {}", names.join(", "));
        }
    }
    libtest_mimic::run(&args, trials).exit_code()
}
