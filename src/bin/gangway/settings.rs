//! What a rank states to the others before a job runs ([`gangway::job::Settings`]): every flag of
//! its command line as clap parsed it (defaults included, named as the user types them), input
//! files and directories by their contents, the bundled corpora's contents and the build. Left
//! out, as a rank's own: where it writes (trace, reports, checkpoints) and which devices it uses.

use clap::{ArgMatches, Command};
use gangway::job::Settings;
use std::any::TypeId;
use std::path::PathBuf;

/// Flags naming where a rank writes: each rank may write its own (only rank 0 does, but the
/// paths need not agree). `checkpoint` is an output only under `train`; elsewhere it is read.
const OUTPUTS: [&str; 6] = ["trace", "json", "markdown", "svg", "out", "checkpoint_dir"];

/// Flags choosing a rank's own devices: hosts may differ, and the job's mesh is agreed on when
/// it is formed.
const DEVICE_FLAGS: [&str; 3] = ["backends", "virtual_devices", "adapters"];

/// Whether flag `id` of the subcommand at `path` names where a rank writes.
fn is_output(path: &[&str], id: &str) -> bool {
    OUTPUTS.contains(&id) || (id == "checkpoint" && path.first() == Some(&"train"))
}

/// The settings of the command line `matches` parsed with `command`.
pub(crate) fn of_command_line(command: &Command, matches: &ArgMatches) -> Settings {
    let mut settings = Settings::new();
    settings.set(
        "gangway build",
        format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            env!("GANGWAY_GIT_HASH")
        ),
    );
    settings.input("bundled corpora", &gangway::data::corpora_dir());
    add(&mut settings, command, matches, &mut Vec::new());
    settings
}

fn add<'a>(
    settings: &mut Settings,
    command: &'a Command,
    matches: &'a ArgMatches,
    path: &mut Vec<&'a str>,
) {
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if is_output(path, id) || DEVICE_FLAGS.contains(&id) {
            continue;
        }
        // Global flags appear in every subcommand's matches too: take them once, at the top.
        if arg.is_global_set() && !path.is_empty() {
            continue;
        }
        let Ok(Some(values)) = matches.try_get_raw(id) else {
            continue;
        };
        let name = flag_name(path, arg);
        let values: Vec<_> = values.collect();
        if arg.get_value_parser().type_id() == TypeId::of::<PathBuf>() {
            for (i, value) in values.iter().enumerate() {
                let which = if values.len() > 1 {
                    format!("{name} #{}", i + 1)
                } else {
                    name.clone()
                };
                settings.input(which, &PathBuf::from(value));
            }
        } else {
            let text: Vec<_> = values.iter().map(|v| v.to_string_lossy()).collect();
            settings.set(name, text.join(" "));
        }
    }
    if let Some((sub, sub_matches)) = matches.subcommand()
        && let Some(sub_command) = command.find_subcommand(sub)
    {
        path.push(sub_command.get_name());
        add(settings, sub_command, sub_matches, path);
        path.pop();
    }
}

/// `train lm --seed`, or `train lm <FILE>` for a positional argument.
fn flag_name(path: &[&str], arg: &clap::Arg) -> String {
    let flag = match arg.get_long() {
        Some(long) => format!("--{long}"),
        None => format!("<{}>", arg.get_id().as_str().to_uppercase()),
    };
    path.iter()
        .copied()
        .chain([flag.as_str()])
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn settings(args: &[&str]) -> Settings {
        let command = crate::Cli::command();
        let matches = command
            .clone()
            .try_get_matches_from(std::iter::once("gangway").chain(args.iter().copied()))
            .unwrap();
        of_command_line(&command, &matches)
    }

    #[test]
    fn every_flag_that_changes_the_work_is_a_setting_and_outputs_are_not() {
        let base = ["train", "moe", "--steps", "4", "--json", "a.json"];
        let one = settings(&base);
        let get = |s: &Settings, name: &str| {
            s.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        assert_eq!(get(&one, "train moe --steps").as_deref(), Some("4"));
        // A default is a setting too: another build's default would differ.
        assert!(get(&one, "train moe --lr").is_some());
        assert!(get(&one, "train moe --json").is_none());
        assert!(get(&one, "--trace").is_none());
        let other_json = settings(&["train", "moe", "--steps", "4", "--json", "b.json"]);
        assert!(other_json.differences(&one).is_empty());
        let other_seed = settings(&["train", "moe", "--steps", "4", "--seed", "9"]);
        let d = other_seed.differences(&one);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].0, "train moe --seed");
        let on_devices = settings(&["--virtual-devices", "3", "train", "moe", "--steps", "4"]);
        assert!(on_devices.differences(&one).is_empty());
    }

    #[test]
    fn input_files_are_compared_by_their_contents() {
        let dir = std::env::temp_dir().join(format!("gangway-cli-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.txt"), dir.join("b.txt"));
        std::fs::write(&a, "some text").unwrap();
        std::fs::write(&b, "some text").unwrap();
        let x = settings(&["train", "lm", "--corpus", a.to_str().unwrap()]);
        let y = settings(&["train", "lm", "--corpus", b.to_str().unwrap()]);
        assert!(y.differences(&x).is_empty());
        std::fs::write(&b, "other text").unwrap();
        let y = settings(&["train", "lm", "--corpus", b.to_str().unwrap()]);
        assert_eq!(y.differences(&x)[0].0, "train lm --corpus");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every path a command takes is either an output (left out) or read (its contents
    /// compared): a new path flag must be sorted into one of the two here.
    #[test]
    fn every_path_flag_is_sorted() {
        /// Every path flag: its subcommand path and id.
        fn walk(command: &Command, path: &mut Vec<String>, found: &mut Vec<(Vec<String>, String)>) {
            for arg in command.get_arguments() {
                if arg.get_value_parser().type_id() == TypeId::of::<PathBuf>() {
                    found.push((path.clone(), arg.get_id().to_string()));
                }
            }
            for sub in command.get_subcommands() {
                path.push(sub.get_name().to_string());
                walk(sub, path, found);
                path.pop();
            }
        }
        let mut found = Vec::new();
        walk(&crate::Cli::command(), &mut Vec::new(), &mut found);
        let read = [
            "plan report",
            "trace file",
            "train btm-branch domain",
            "eval moe-vs-dense corpus",
            "train lm corpus",
            "train lm resume",
            "train lm init",
            "train lm config",
            "eval lm checkpoint",
            "eval lm file",
            "generate checkpoint",
            "generate prompt_file",
            "export checkpoint",
            "import weights",
            "import config",
            "train btm domains",
            "eval btm domains",
            "train moe corpus",
            "train moe resume",
            "train moe init",
            "pipeline costs_from",
            "bench compare old",
            "bench compare new",
            "bench side-by-side reports",
        ];
        let named = |(path, id): &(Vec<String>, String)| format!("{} {id}", path.join(" "));
        for flag in &found {
            let path: Vec<&str> = flag.0.iter().map(String::as_str).collect();
            assert!(
                is_output(&path, &flag.1) || read.contains(&named(flag).trim()),
                "{}: sort it into OUTPUTS or the inputs",
                named(flag)
            );
        }
        for r in read {
            assert!(
                found.iter().any(|f| named(f).trim() == r),
                "{r}: no such path flag"
            );
        }
    }
}
