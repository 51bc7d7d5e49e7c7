//! The lab's formula line: its arithmetic evaluated, and its glosses against the simulation
//! beside them.

use super::*;

/// Evaluates an arithmetic expression of numbers and `vars` with `+ - * /`, parentheses and
/// implicit products (`2F`, `3m`, `(p - 1)(m + 3)`), as the lab's formula lines write them.
fn eval(expr: &str, vars: &std::collections::HashMap<String, f64>) -> f64 {
    #[derive(Debug, Clone, PartialEq)]
    enum T {
        Num(f64),
        Name(String),
        Op(char),
    }
    let mut tokens = Vec::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || c == '.' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '.') {
                i += 1;
            }
            let text: String = chars[start..i].iter().collect();
            tokens.push(T::Num(text.parse().unwrap()));
        } else if c.is_alphabetic() {
            let start = i;
            while i < chars.len()
                && (chars[i].is_alphanumeric() || chars[i] == '_' || chars[i] == '&')
            {
                i += 1;
            }
            tokens.push(T::Name(chars[start..i].iter().collect()));
        } else {
            assert!("+-*/()".contains(c), "{c:?} in {expr:?}");
            tokens.push(T::Op(c));
            i += 1;
        }
    }
    struct P<'a> {
        t: Vec<T>,
        at: usize,
        vars: &'a std::collections::HashMap<String, f64>,
    }
    impl P<'_> {
        fn peek(&self) -> Option<&T> {
            self.t.get(self.at)
        }
        fn expr(&mut self) -> f64 {
            let mut v = self.term();
            while let Some(T::Op(c @ ('+' | '-'))) = self.peek().cloned() {
                self.at += 1;
                let r = self.term();
                v = if c == '+' { v + r } else { v - r };
            }
            v
        }
        fn term(&mut self) -> f64 {
            let mut v = self.factor();
            loop {
                match self.peek().cloned() {
                    Some(T::Op(c @ ('*' | '/'))) => {
                        self.at += 1;
                        let r = self.factor();
                        v = if c == '*' { v * r } else { v / r };
                    }
                    Some(T::Num(_) | T::Name(_) | T::Op('(')) => v *= self.factor(),
                    _ => return v,
                }
            }
        }
        fn factor(&mut self) -> f64 {
            let t = self.peek().cloned();
            self.at += 1;
            match t {
                Some(T::Num(n)) => n,
                Some(T::Name(n)) => *self.vars.get(&n).unwrap_or_else(|| panic!("{n}?")),
                Some(T::Op('-')) => -self.factor(),
                Some(T::Op('(')) => {
                    let v = self.expr();
                    assert_eq!(self.peek(), Some(&T::Op(')')));
                    self.at += 1;
                    v
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    let mut p = P {
        t: tokens,
        at: 0,
        vars,
    };
    let v = p.expr();
    assert_eq!(p.at, p.t.len(), "left over in {expr:?}");
    v
}

/// Issue 38: DualPipe's line said "F&B = F + B", which makes its own bracket 0, not 2F. Every
/// formula line's stated arithmetic is evaluated here, step by step, with its own definitions
/// (F&B, B_full) at F = B = W = 1: each step equals the next, and the last is the library's
/// textbook figure (the bubble fraction, or idle per stage in F).
#[test]
fn every_formula_line_states_arithmetic_that_holds() {
    use gangway::pipeline::{Costs, textbook};
    use gangway_viewer::bubble_lab::formula_text;
    use std::collections::HashMap;
    for (p, m, v) in [(4, 8, 2), (6, 12, 3), (8, 16, 2)] {
        for kind in ScheduleKind::ALL {
            if matches!(
                kind,
                ScheduleKind::ZbV | ScheduleKind::ZbAuto | ScheduleKind::VHalf | ScheduleKind::VMin
            ) {
                continue; // no closed form: nothing to evaluate
            }
            let text = formula_text(kind, p, m, v);
            let (main, defs) = text.split_once("; ").unwrap_or((&text, ""));
            let main = main.trim_end_matches(" if F = B = W");
            let mut vars: HashMap<String, f64> = [
                ("p", p as f64),
                ("m", m as f64),
                ("v", v as f64),
                ("F", 1.0),
                ("B", 1.0),
                ("W", 1.0),
            ]
            .into_iter()
            .map(|(k, x)| (k.to_string(), x))
            .collect();
            for d in defs.split(", ") {
                if let Some((name, e)) = d.split_once(" = ") {
                    let e = e.split(" is ").next().unwrap();
                    let x = eval(e, &vars);
                    vars.insert(name.to_string(), x);
                }
            }
            let mut parts = main.split(" = ");
            let label = parts.next().unwrap();
            let values: Vec<f64> = parts.map(|e| eval(e, &vars)).collect();
            assert!(values.len() >= 3, "{text}");
            for w in values.windows(2) {
                assert!((w[0] - w[1]).abs() < 1e-9, "{text}: {values:?}");
            }
            let want = if label == "bubble" {
                bubble_formula(kind, p, m, v).unwrap()
            } else {
                assert_eq!(label, "idle per stage", "{text}");
                let t = textbook(kind, p, m, v, &Costs::compute_only(1000, 1000, 1000));
                t.idle_per_stage_ns.unwrap() as f64 / 1000.0
            };
            assert!(
                (values[0] - want).abs() < 1e-9,
                "{text}: states {} where the library has {want}",
                values[0]
            );
        }
    }
}

/// Issue 57: the glosses beside V-Half's, V-Min's and zb-auto's figures said "about 1/2" and
/// "about 1/3" of 1F1B's activations beside peaks of 3 and 2 of 4, and ZB-H1's bubble for
/// zb-auto whatever the costs. Each is computed from the simulation beside it now.
#[test]
fn the_formula_line_says_what_the_simulation_beside_it_shows() {
    let mut h = common::harness([1400.0, 1000.0]);
    let line = |h: &egui_kittest::Harness<'static, gangway_viewer::ViewerApp>| {
        let lab = &h.state().lab;
        gangway_viewer::bubble_lab::formula_line(&lab.params, lab.result.as_ref().unwrap().row())
    };
    let held = |h: &egui_kittest::Harness<'static, gangway_viewer::ViewerApp>| {
        let row = h.state().lab.result.as_ref().unwrap().row().clone();
        row.peak_microbatches().into_iter().fold(0.0f64, f64::max)
    };
    for kind in ["V-Half", "V-Min"] {
        h.get_by_label(kind).click();
        h.run();
        let most = held(&h);
        let text = line(&h);
        assert!(
            text.contains(&format!(
                "it holds at most {most} of 1F1B's 4 activations a stage"
            )),
            "{kind}: {text}"
        );
        h.get_by_label_contains(&format!("it holds at most {most} of 1F1B's"));
    }
    // zb-auto at F = B = W with free transfers: its simulated bubble against ZB-H1's formula.
    h.get_by_label("ZB auto").click();
    h.run();
    let bubble = h
        .state()
        .lab
        .result
        .as_ref()
        .unwrap()
        .row()
        .sim
        .bubble_fraction;
    let text = line(&h);
    let zb_h1 = 3.0 / (3.0 * 8.0 + 3.0);
    if (bubble - zb_h1).abs() < 1e-9 {
        assert!(
            text.contains("its plan has ZB-H1's bubble, (p - 1) / (3m + p - 1) = 3/27"),
            "{text}"
        );
    } else {
        assert!(text.contains("against ZB-H1's 3/27"), "{text}");
    }
    // Other costs: no ZB-H1 formula, the activations it holds.
    common::set_slider(&mut h, "B", 2.0);
    let text = line(&h);
    assert!(!text.contains("ZB-H1"), "{text}");
    assert!(
        text.contains("of 1F1B's 4 activations a stage here"),
        "{text}"
    );
}
