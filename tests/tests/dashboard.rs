//! The live dashboard and the timeline file, as a user meets them: `lazarus run
//! --dashboard 127.0.0.1:0 --timeline FILE` on 4 nodes with recovery on, the page open in
//! headless Chromium (driven through chromedriver), one node SIGKILLed from outside by
//! PID. While the run goes, the page must show every node running, then the killed one
//! dead, restored and replayed as its next incarnation, on the timeline too, and at the
//! end the verified verdict; its screenshot is kept (`docs/dashboard.png` is one, taken
//! with `LAZARUS_UPDATE_DOCS=1`). The timeline file holds the same events as JSON lines
//! and a Chrome trace with the checkpoints and the recovery as spans.
//!
//! Chromium and chromedriver come from the set-up script (Debian's `chromium` and
//! `chromium-driver`); without them the test skips, unless `LAZARUS_TEST_REQUIRE_ALL=1`.

mod support;

use fantoccini::{Client, ClientBuilder, Locator};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::bin;
use support::launched::Launched;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// How long the page may take to show what the run did.
const PAGE_PATIENCE: Duration = Duration::from_secs(60);

/// Iterations of jacobi2d: about 8 s with recovery on (see recovery_kill.rs), so that a
/// kill after the first checkpoints and its recovery land well inside the run.
const ITERS: &str = "40000";

fn browser_present() -> bool {
    let present = Path::new(CHROMIUM).exists() && Path::new(CHROMEDRIVER).exists();
    if !present {
        assert!(
            std::env::var("LAZARUS_TEST_REQUIRE_ALL").as_deref() != Ok("1"),
            "LAZARUS_TEST_REQUIRE_ALL=1 but {CHROMIUM} or {CHROMEDRIVER} is missing \
             (scripts/setup.sh installs them)"
        );
        eprintln!("skipped: no {CHROMIUM} or {CHROMEDRIVER}");
    }
    present
}

/// chromedriver on a free port; killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver listens");
            std::thread::sleep(Duration::from_millis(50));
        }
        Driver { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn open_browser(driver: &Driver, profile: &Path) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--window-size=1280,860",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a headless Chromium session")
}

/// Waits until `css` matches at least `count` elements; returns how many.
async fn wait_for_elements(page: &Client, what: &str, css: &str, count: usize) -> usize {
    let deadline = Instant::now() + PAGE_PATIENCE;
    loop {
        let found = page
            .find_all(Locator::Css(css))
            .await
            .map_or(0, |v| v.len());
        if found >= count {
            return found;
        }
        if Instant::now() > deadline {
            let html = page.source().await.unwrap_or_default();
            panic!("the page never showed {what} (`{css}`, {found} of {count}):\n{html}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Width and height of a PNG image, from its header.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG image");
    let be = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
    (be(16), be(20))
}

#[test]
fn the_dashboard_shows_a_killed_node_restored_and_replayed_and_the_verified_verdict() {
    if !browser_present() {
        return;
    }
    let _one = support::one_at_a_time();
    let dir = std::env::temp_dir().join(format!("lazarus-dashboard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let events_file = dir.join("run.jsonl");
    let mut cmd = Command::new(bin("lazarus"));
    cmd.args([
        "run",
        "-n",
        "4",
        "--ft",
        "on",
        "--checkpoint-every",
        "500ms",
    ])
    .args(["--dashboard", "127.0.0.1:0", "--timeline"])
    .arg(&events_file)
    .arg("--")
    .arg(bin("jacobi2d"))
    .args(["--n", "256", "--iters", ITERS, "--check", "bounds"]);
    let mut run = Launched::spawn(cmd, 4);
    let said = run.wait_for("the dashboard's address", |l| {
        l.starts_with("lazarus: dashboard at http://")
    });
    let url = said
        .trim_start_matches("lazarus: dashboard at ")
        .to_string();
    run.wait_started();

    let driver = Driver::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let screenshot = runtime.block_on(async {
        let page = open_browser(&driver, &dir.join("profile")).await;
        page.goto(&url).await.expect("the page loads");
        wait_for_elements(&page, "four running nodes", "tr[data-state=running]", 4).await;
        wait_for_elements(
            &page,
            "a checkpoint of node 2",
            "rect[data-kind=checkpoint][data-rank='2']",
            1,
        )
        .await;
        // From outside, by PID, as an operator or the machine would.
        run.kill(2);
        wait_for_elements(
            &page,
            "node 2's death on the timeline",
            "rect[data-kind=death][data-rank='2']",
            1,
        )
        .await;
        wait_for_elements(
            &page,
            "node 2 restored and replayed",
            "rect[data-kind=replay][data-rank='2']",
            1,
        )
        .await;
        // Running again, or already finished: on a loaded machine the page may first
        // look after the restored node has done its part.
        wait_for_elements(
            &page,
            "node 2 running again as incarnation 1",
            "tr[data-rank='2'][data-incarnation='1'][data-state=running], \
             tr[data-rank='2'][data-incarnation='1'][data-state=finished]",
            1,
        )
        .await;
        wait_for_elements(
            &page,
            "the verified verdict",
            "#verdict[data-verdict=verified]",
            1,
        )
        .await;
        let rows = wait_for_elements(&page, "the four nodes", "#nodes tbody tr", 4).await;
        assert_eq!(rows, 4, "one row per rank, not per process");
        wait_for_elements(&page, "message-rate lines", "#rate polyline", 4).await;
        wait_for_elements(&page, "log-size lines", "#log polyline", 4).await;
        let png = page.screenshot().await.expect("a screenshot");
        page.close().await.expect("the browser closes");
        png
    });
    drop(driver);
    let f = run.finish();
    f.verified();

    let (w, h) = png_size(&screenshot);
    assert!(w >= 800 && h >= 600, "a whole page, {w}x{h}");
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard.png");
    std::fs::write(&target, &screenshot).unwrap();
    if std::env::var("LAZARUS_UPDATE_DOCS").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/dashboard.png");
        std::fs::write(docs, &screenshot).unwrap();
    }

    // The same events in the file: node 2 died once and replayed; its trace has spans.
    let events: Vec<serde_json::Value> = std::fs::read_to_string(&events_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let of = |kind: &str, rank: u64| {
        events
            .iter()
            .filter(|e| e["kind"] == kind && e["rank"] == rank)
            .count()
    };
    assert_eq!(of("died", 2), 1, "node 2 died once");
    assert_eq!(of("replayed", 2), 1, "and replayed once");
    assert!(of("sample", 0) > 4, "samples were taken as the run went");
    let verdict = events.last().expect("events");
    assert_eq!(verdict["kind"], "verdict");
    assert_eq!(verdict["fields"]["verified"], "true");
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("run.trace.json")).unwrap()).unwrap();
    let spans = |name: &str| {
        trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"] == name)
            .count()
    };
    assert!(spans("checkpoint") >= 4, "checkpoints are spans");
    assert_eq!(spans("recovery"), 1, "node 2's recovery is one span");
    let _ = std::fs::remove_dir_all(&dir);
}
