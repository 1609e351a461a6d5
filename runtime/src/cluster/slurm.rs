//! Reading Slurm's description of a job step: host lists and task counts.

/// Expands a Slurm host list such as `node[01-03,07],gpu5` into host names.
pub fn expand_hostlist(list: &str) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for item in split_top_level(list) {
        let Some(open) = item.find('[') else {
            if !item.is_empty() {
                hosts.push(item.to_string());
            }
            continue;
        };
        let close = item
            .rfind(']')
            .filter(|close| *close > open)
            .ok_or_else(|| format!("unbalanced brackets in host list `{list}`"))?;
        let (prefix, ranges, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        for range in ranges.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let width = lo.len();
            let lo_n: u64 = lo
                .parse()
                .map_err(|_| format!("bad range `{range}` in `{list}`"))?;
            let hi_n: u64 = hi
                .parse()
                .map_err(|_| format!("bad range `{range}` in `{list}`"))?;
            if hi_n < lo_n || hi_n - lo_n > 100_000 {
                return Err(format!("bad range `{range}` in `{list}`"));
            }
            for n in lo_n..=hi_n {
                // More hosts than a cluster may have tasks: refused before the list is
                // expanded into memory, whatever the number of ranges.
                if hosts.len() >= MAX_TASKS {
                    return Err(format!("host list `{list}` names over {MAX_TASKS} hosts"));
                }
                hosts.push(format!("{prefix}{n:0width$}{suffix}"));
            }
        }
    }
    Ok(hosts)
}

/// Splits on commas that are not inside brackets.
fn split_top_level(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out
}

/// The most tasks a job step may have (ranks are 16-bit), and the most hosts.
pub const MAX_TASKS: usize = u16::MAX as usize;

/// Expands `SLURM_STEP_TASKS_PER_NODE` such as `2(x3),1` into per-host task counts.
pub fn expand_tasks_per_node(spec: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let (count, repeat) = match item.split_once("(x") {
            Some((c, r)) => (c, r.trim_end_matches(')')),
            None => (item, "1"),
        };
        let count: usize = count
            .parse()
            .map_err(|_| format!("bad tasks-per-node `{spec}`"))?;
        let repeat: usize = repeat
            .parse()
            .map_err(|_| format!("bad tasks-per-node `{spec}`"))?;
        // Ranks are 16-bit: larger counts are a malformed variable, not a job.
        if count > MAX_TASKS || repeat > MAX_TASKS - out.len() {
            return Err(format!(
                "tasks-per-node `{spec}` describes more than {MAX_TASKS} tasks or hosts"
            ));
        }
        out.extend(std::iter::repeat_n(count, repeat));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_expand_with_zero_padding_and_plain_names() {
        assert_eq!(
            expand_hostlist("node[01-03,07],gpu5").unwrap(),
            ["node01", "node02", "node03", "node07", "gpu5"]
        );
        assert_eq!(expand_hostlist("localhost").unwrap(), ["localhost"]);
        assert!(expand_hostlist("n[1-").is_err());
        assert!(expand_hostlist("n[5-1]").is_err());
        assert!(
            expand_hostlist("a]b[c").is_err(),
            "a bracket closed before it opens"
        );
        // Each range is within bounds, together they name more hosts than ranks.
        let many = format!("n[{}]", vec!["0-99999"; 20].join(","));
        assert!(expand_hostlist(&many).is_err(), "refused, not expanded");
        assert_eq!(expand_hostlist("n[1-65535]").unwrap().len(), MAX_TASKS);
    }

    #[test]
    fn tasks_per_node_expands_repeats() {
        assert_eq!(expand_tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(expand_tasks_per_node("4").unwrap(), [4]);
        assert!(expand_tasks_per_node("x").is_err());
        assert!(
            expand_tasks_per_node("1(x99999999999)").is_err(),
            "refused, not allocated"
        );
        assert!(expand_tasks_per_node("99999999999").is_err());
        assert!(expand_tasks_per_node("1(x65535),1").is_err());
    }
}
