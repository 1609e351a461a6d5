//! Reading back what criterion measured: where it writes (the same directory the benches
//! hand to criterion), and the median of one benchmark from its `estimates.json`.

use crate::target::target_dir;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Where criterion writes: `CRITERION_HOME`, else `criterion/` in the target directory.
/// Resolved the way criterion resolves its own default and handed to criterion
/// explicitly by the benches, so that readers find the very files it wrote.
pub fn criterion_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    target_dir().join("criterion")
}

/// The median time in ns of benchmark `id` (`group/function[/parameter]`), if criterion
/// measured it at or after `since` (files from earlier runs, `--test` mode or filtered
/// benchmarks are ignored), and its file is readable.
pub fn median_ns(dir: &Path, id: &str, since: SystemTime) -> Option<f64> {
    let path = dir.join(id).join("new").join("estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_fresh_median_and_ignores_old_or_broken_files() {
        let dir = std::env::temp_dir().join(format!("lazarus-crit-test-{}", std::process::id()));
        let new = dir.join("g/f/1/new");
        std::fs::create_dir_all(&new).unwrap();
        let before = SystemTime::now() - std::time::Duration::from_secs(5);
        std::fs::write(
            new.join("estimates.json"),
            r#"{"median":{"point_estimate":12.5}}"#,
        )
        .unwrap();
        assert_eq!(median_ns(&dir, "g/f/1", before), Some(12.5));
        let later = SystemTime::now() + std::time::Duration::from_secs(60);
        assert_eq!(median_ns(&dir, "g/f/1", later), None);
        std::fs::write(new.join("estimates.json"), "not json").unwrap();
        assert_eq!(median_ns(&dir, "g/f/1", before), None);
        assert_eq!(median_ns(&dir, "g/missing", before), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
