//! The page `tenure serve` draws: every group's status at `/`, one group
//! at `/groups/{group}` — members, a map of partitions by owner (one
//! colour per member, the fencing token on hover), lag over the window,
//! the partitions' table and a timeline. Everything but the chart is in
//! the HTML itself, readable without JavaScript; the script
//! (`assets/page.js`, embedded) keeps it live from `/v1/events` and draws
//! the chart. No build step: plain files, served from the binary.

use std::fmt::Write;

use serde::Serialize;
use tenure_admin::overview::{GroupHealth, Overview, TimelineEntry, TimelineKind};

/// The page's script.
pub const SCRIPT: &str = include_str!("../../assets/page.js");
/// The page's style sheet.
pub const STYLE: &str = include_str!("../../assets/page.css");

/// One group in a line: what `/` lists and its `summary` events carry.
#[derive(Serialize)]
pub struct GroupSummary<'a> {
    group: &'a str,
    status: &'static str,
    reason: &'a str,
    members: usize,
    partitions: usize,
    unowned: usize,
    total_lag: Option<u64>,
    max_lag: Option<u64>,
}

/// The summary `/` shows and its events carry.
#[derive(Serialize)]
pub struct Summary<'a> {
    store: &'a str,
    store_error: Option<&'a str>,
    kafka_error: Option<&'a str>,
    updated_ms: u64,
    groups: Vec<GroupSummary<'a>>,
}

/// The summary of `overview`.
pub fn summary(overview: &Overview) -> Summary<'_> {
    Summary {
        store: &overview.store,
        store_error: overview.store_error.as_deref(),
        kafka_error: overview.kafka_error.as_deref(),
        updated_ms: overview.updated_ms,
        groups: overview
            .groups
            .iter()
            .map(|g| GroupSummary {
                group: &g.group,
                status: g.status.as_str(),
                reason: &g.reason,
                members: g.members.len(),
                partitions: g.partitions.len(),
                unowned: g.unowned,
                total_lag: g.total_lag,
                max_lag: g.max_lag,
            })
            .collect(),
    }
}

/// Text as HTML.
fn escape(text: &str) -> String {
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

/// A group's name as a path segment.
fn url_segment(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

fn head(title: &str, body_attributes: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><link rel=\"stylesheet\" href=\"/assets/page.css\"></head>\n\
         <body{body_attributes}>\n",
        escape(title)
    )
}

fn connections(overview: &Overview) -> String {
    let mut out = format!("<p id=\"store\">{}", escape(&overview.store));
    if let Some(error) = &overview.store_error {
        let _ = write!(
            out,
            " — <b class=\"bad\">cannot be watched: {}</b>",
            escape(error)
        );
    }
    if let Some(error) = &overview.kafka_error {
        let _ = write!(out, " — <b class=\"bad\">Kafka: {}</b>", escape(error));
    }
    let _ = writeln!(
        out,
        " — Kafka read every {} ms, window of {} samples</p>",
        overview.kafka_interval_ms, overview.window
    );
    out
}

fn lag_text(lag: Option<u64>) -> String {
    lag.map_or_else(|| "–".to_owned(), |l| l.to_string())
}

/// `/`: every group's status.
pub fn index(overview: &Overview) -> String {
    let mut out = head("tenure · groups", " data-page=\"index\"");
    out.push_str("<header><h1>tenure · groups</h1></header>\n");
    out.push_str(&connections(overview));
    out.push_str(
        "<table id=\"groups\"><thead><tr><th>group</th><th>status</th><th>members</th>\
         <th>partitions</th><th>unowned</th><th>total lag</th><th>max lag</th><th>why</th>\
         </tr></thead><tbody>\n",
    );
    for g in &overview.groups {
        let _ = writeln!(
            out,
            "<tr data-group=\"{name}\"><td><a href=\"/groups/{url}\">{name}</a></td>\
             <td><span class=\"status s-{status}\">{status}</span></td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            g.members.len(),
            g.partitions.len(),
            g.unowned,
            lag_text(g.total_lag),
            lag_text(g.max_lag),
            escape(&g.reason),
            name = escape(&g.group),
            url = url_segment(&g.group),
            status = g.status.as_str(),
        );
    }
    out.push_str("</tbody></table>\n<script src=\"/assets/page.js\"></script>\n</body></html>\n");
    out
}

/// A member's colour: hues spread by the golden angle over the members in
/// id order (the script computes the same).
fn colour(index: usize) -> String {
    format!("hsl({:.0} 65% 55%)", (index as f64 * 137.508) % 360.0)
}

/// `/groups/{group}`: one group.
pub fn group(overview: &Overview, group: &GroupHealth) -> String {
    let name = escape(&group.group);
    let mut out = head(
        &format!("tenure · {}", group.group),
        &format!(" data-page=\"group\" data-group=\"{name}\""),
    );
    let _ = writeln!(
        out,
        "<header><h1><a href=\"/\">tenure</a> · group {name}</h1>\
         <p><span id=\"status\" class=\"status s-{status}\">{status}</span> \
         <span id=\"reason\">{}</span></p></header>",
        escape(&group.reason),
        status = group.status.as_str(),
    );
    out.push_str(&connections(overview));

    out.push_str("<section><h2>Members</h2><table id=\"members\"><thead><tr><th></th><th>member</th><th>host</th>\
                  <th>strategy</th><th>subscription</th><th>partitions</th></tr></thead><tbody>\n");
    for (i, m) in group.members.iter().enumerate() {
        let _ = writeln!(
            out,
            "<tr data-member=\"{id}\"><td><span class=\"swatch\" style=\"background:{}\"></span></td>\
             <td>{id}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            colour(i),
            escape(m.host.as_deref().unwrap_or("–")),
            escape(&m.strategy),
            escape(&m.subscription),
            m.partitions,
            id = escape(&m.id),
        );
    }
    out.push_str("</tbody></table>\n");
    if !group.mismatches.is_empty() {
        out.push_str("<ul id=\"mismatches\" class=\"bad\">");
        for mismatch in &group.mismatches {
            let _ = write!(out, "<li>{}</li>", escape(mismatch));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</section>\n");

    out.push_str("<section><h2>Owners</h2><div id=\"map\">\n");
    let mut owners: Vec<(Option<&str>, String)> = group
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| (Some(m.id.as_str()), colour(i)))
        .collect();
    owners.push((None, "transparent".to_owned()));
    for (owner, colour) in owners {
        let cells: Vec<String> = group
            .partitions
            .iter()
            .filter(|p| p.owner.as_deref() == owner)
            .map(|p| {
                let title = match p.token {
                    Some(token) => format!("{}/{} · token {token}", p.topic, p.partition),
                    None => format!("{}/{} · no owner", p.topic, p.partition),
                };
                format!(
                    "<span class=\"cell s-{}\" data-partition=\"{}/{}\" title=\"{}\" style=\"background:{colour}\">{}</span>",
                    p.status.as_str(),
                    escape(&p.topic),
                    p.partition,
                    escape(&title),
                    p.partition
                )
            })
            .collect();
        if owner.is_some() || !cells.is_empty() {
            let label = owner.map_or_else(|| "no owner".to_owned(), escape);
            let _ = writeln!(
                out,
                "<div class=\"owner\" data-member=\"{}\"><h3>{label}</h3>{}</div>",
                owner.map(escape).unwrap_or_default(),
                cells.concat()
            );
        }
    }
    out.push_str("</div></section>\n");

    out.push_str(
        "<section><h2>Lag over the window</h2><svg id=\"chart\" viewBox=\"0 0 600 160\" \
         role=\"img\" aria-label=\"lag per partition over the window\"></svg>\
         <noscript><p>(the chart needs JavaScript; the table below has each lag)</p></noscript></section>\n",
    );

    out.push_str("<section><h2>Partitions</h2><table id=\"partitions\"><thead><tr><th>partition</th><th>owner</th>\
                  <th>token</th><th>committed</th><th>log end</th><th>lag</th><th>status</th><th>why</th>\
                  </tr></thead><tbody>\n");
    for p in &group.partitions {
        let _ = writeln!(
            out,
            "<tr><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td><span class=\"status s-{status}\">{status}</span></td><td>{}</td></tr>",
            escape(&p.topic),
            p.partition,
            escape(p.owner.as_deref().unwrap_or("–")),
            p.token.map_or_else(|| "–".to_owned(), |t| t.to_string()),
            p.committed
                .map_or_else(|| "–".to_owned(), |c| c.to_string()),
            p.log_end.map_or_else(|| "–".to_owned(), |c| c.to_string()),
            lag_text(p.lag),
            escape(&p.reason),
            status = p.status.as_str(),
        );
    }
    out.push_str("</tbody></table></section>\n");

    out.push_str("<section><h2>Timeline</h2><ol id=\"timeline\" reversed>\n");
    for entry in group.timeline.iter().rev().take(100) {
        let _ = writeln!(out, "<li>{}</li>", escape(&timeline_text(entry)));
    }
    out.push_str("</ol></section>\n<script src=\"/assets/page.js\"></script>\n</body></html>\n");
    out
}

/// A timeline entry in words (the script writes the same).
pub fn timeline_text(entry: &TimelineEntry) -> String {
    let at = tenure_admin::serialize::rfc3339(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(entry.at_ms),
    );
    let partition = entry.partition.as_deref().unwrap_or("?");
    let token = entry
        .token
        .map(|t| format!(" (token {t})"))
        .unwrap_or_default();
    let what = match entry.kind {
        TimelineKind::Joined => format!("{} joined", entry.member),
        TimelineKind::Left => format!("{} left", entry.member),
        TimelineKind::Claimed => format!("{} claimed {partition}{token}", entry.member),
        TimelineKind::Released => format!("{} released {partition}", entry.member),
        TimelineKind::Handoff => format!(
            "{partition} moved from {} to {}{token}",
            entry.from.as_deref().unwrap_or("?"),
            entry.member
        ),
        _ => format!("{} {partition}", entry.member),
    };
    format!("{at} {what}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_escaped_in_html_and_urls() {
        assert_eq!(
            escape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(url_segment("a b/c"), "a%20b%2Fc");
    }
}
