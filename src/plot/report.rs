//! The self-contained HTML latency report (`bench --report`, `run
//! --report`): the machine, the config, the table and the percentile plots
//! in one file with nothing to fetch, the numbers also embedded as JSON.

/// Everything one report shows.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HtmlReport {
    pub title: String,
    /// (what, value) rows about the machine and the run.
    pub machine: Vec<(String, String)>,
    /// The config the run used (TOML), shown verbatim.
    pub config: String,
    /// Latency rows: name, then (column, value, metric key) cells; the key
    /// lands in `data-metric` so a reader can find each number.
    pub rows: Vec<ReportRow>,
    /// Column headings of `rows` (after the name).
    pub columns: Vec<String>,
    /// The plain-text report as the CLI prints it.
    pub text: String,
    /// (heading, SVG) plots.
    pub plots: Vec<(String, String)>,
    /// The report's numbers as JSON (embedded in a `<script
    /// type="application/json" id="report-data">`).
    pub data: serde_json::Value,
}

/// One row of the latency table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportRow {
    pub name: String,
    /// (value, metric key) in column order.
    pub cells: Vec<(f64, String)>,
}

/// Escapes text for HTML element content and attribute values.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{v:.0}") } else { format!("{v:.2}") }
}

impl HtmlReport {
    /// The report as one HTML document.
    pub fn render(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::with_capacity(64 * 1024);
        let title = escape_html(&self.title);
        let _ = write!(
            out,
            "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n<style>\n\
             body {{ font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2330; max-width: 1100px; }}\n\
             table {{ border-collapse: collapse; margin: 8px 0 18px; }}\n\
             td, th {{ padding: 2px 10px; border-bottom: 1px solid #e3e5ea; text-align: left; }}\n\
             td.n, th.n {{ text-align: right; font-variant-numeric: tabular-nums; }}\n\
             pre {{ background: #f4f5f7; padding: 10px; overflow-x: auto; }}\n\
             .plot svg {{ max-width: 100%; height: auto; }}\n\
             </style>\n</head>\n<body data-state=\"loading\">\n<h1>{title}</h1>\n"
        );
        out.push_str("<h2>Machine</h2>\n<table id=\"machine\">\n");
        for (k, v) in &self.machine {
            let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", escape_html(k), escape_html(v));
        }
        out.push_str("</table>\n<h2>Latency</h2>\n<table id=\"latency\">\n<tr><th></th>");
        for c in &self.columns {
            let _ = write!(out, "<th class=\"n\">{}</th>", escape_html(c));
        }
        out.push_str("</tr>\n");
        for row in &self.rows {
            let _ = write!(out, "<tr><td>{}</td>", escape_html(&row.name));
            for (v, key) in &row.cells {
                let _ =
                    write!(out, "<td class=\"n\" data-metric=\"{}\">{}</td>", escape_html(key), number(*v));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</table>\n");
        for (i, (heading, svg)) in self.plots.iter().enumerate() {
            let _ = writeln!(
                out,
                "<h2>{}</h2>\n<div class=\"plot\" id=\"plot-{i}\">{svg}</div>",
                escape_html(heading)
            );
        }
        let _ = writeln!(out, "<h2>Report</h2>\n<pre id=\"text\">{}</pre>", escape_html(&self.text));
        let _ = writeln!(out, "<h2>Config</h2>\n<pre id=\"config\">{}</pre>", escape_html(&self.config));
        // JSON inside a script element: only "</" could end it early.
        let data = self.data.to_string().replace("</", "<\\/");
        let _ = writeln!(out, "<script type=\"application/json\" id=\"report-data\">{data}</script>");
        out.push_str(
            "<script>\n\"use strict\";\n\
             const data = JSON.parse(document.getElementById(\"report-data\").textContent);\n\
             const drawn = document.querySelectorAll(\".plot svg polyline, .plot svg path\").length;\n\
             document.body.dataset.plots = String(document.querySelectorAll(\".plot svg\").length);\n\
             document.body.dataset.drawn = String(drawn);\n\
             document.body.dataset.keys = String(Object.keys(data).length);\n\
             document.body.dataset.state = \"ready\";\n</script>\n</body>\n</html>\n",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_one_escaped_document_with_its_data() {
        let report = HtmlReport {
            title: "bench <host>".into(),
            machine: vec![("cpu".into(), "A & B".into())],
            config: "[ring]\nslots = 8 # <x>\n".into(),
            rows: vec![ReportRow {
                name: "end_to_end".into(),
                cells: vec![(12.5, "latency.end_to_end.0.5".into())],
            }],
            columns: vec!["p50 µs".into()],
            text: "table".into(),
            plots: vec![("percentiles".into(), "<svg><polyline points=\"0,0 1,1\"/></svg>".into())],
            data: serde_json::json!({"x": "</script>"}),
        };
        let html = report.render();
        assert!(html.starts_with("<!doctype html>") && html.ends_with("</html>\n"));
        assert!(
            html.contains("bench &lt;host&gt;") && html.contains("A &amp; B") && html.contains("# &lt;x&gt;")
        );
        assert!(html.contains("data-metric=\"latency.end_to_end.0.5\">12.50</td>"), "{html}");
        assert!(html.contains("<div class=\"plot\" id=\"plot-0\"><svg>"));
        assert!(!html.contains("\"</script>\""), "the JSON cannot end its script element");
        assert!(!html.contains(" src=") && !html.contains("<link"), "nothing to fetch");
    }
}
