"""Open the run and fleet reports in headless Debian Chromium, take screenshots, check everything loaded."""

from __future__ import annotations

import io
import os
import re
import shutil
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest
from report_fixtures import build_warehouse, every_class_specs

from pipeline import lake
from pipeline.report import render_fleet_report, render_run_report

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--disable-dev-shm-usage")


def _require_browser() -> None:
    """Skip without Chromium and its driver (in CI, conftest turns the skip into a failure)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing:
        pytest.skip(f"headless Chromium not installed ({', '.join(missing)} missing); run .ci/install_browser.sh")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    warehouse = build_warehouse(root / "wh", every_class_specs())
    steps = [10, 20, 30]
    lake.write_run_table(warehouse, "step_metrics", "run-anomalous", pa.table({
        "step": pa.array(steps, pa.int64()), "key": ["val-core/lighteval/MATH/acc/mean@4"] * 3,
        "value": [0.31, 0.42, 0.40], "source": ["console"] * 3, "segment": pa.array([0] * 3, pa.int32())}))
    lake.write_run_table(warehouse, "run_advice", "run-cuda-oom", pa.table({
        "rank": pa.array([1, 2], pa.int64()),
        "setting": ["actor_rollout_ref.rollout.gpu_memory_utilization", "actor_rollout_ref.rollout.max_num_batched_tokens"],
        "current_value": ["0.6", "8192"], "suggested_value": ["0.5", "4096"],
        "why": ["generation ran out of device memory: the rollout engine reserves this share of the GPU",
                "fewer tokens per engine forward pass lowers the rollout's activation peak"],
        "source": ["https://verl.readthedocs.io/en/latest/perf/perf_tuning.html",
                   "https://docs.vllm.ai/en/latest/configuration/optimization.html"]}))
    out = root / "reports"
    for run_id in ("run-cuda-oom", "run-anomalous", "run-hostile"):
        render_run_report(warehouse, run_id, out)
    render_fleet_report(warehouse, out, date(2026, 11, 28))
    return out


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.add_argument("--window-size=1280,900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    drv.set_page_load_timeout(60)
    try:
        yield drv
    finally:
        drv.quit()


def _load(driver, uri: str) -> None:
    """Open a page and wait until it has loaded: on a busy machine `get` can return while it is still loading."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(uri)
    WebDriverWait(driver, 60, poll_frequency=0.05).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def _open_and_check(driver, page: Path, shot: Path, min_charts: int) -> None:
    _load(driver, page.resolve().as_uri())
    # a chart is an image (the fleet's, which mail clients show) or inline SVG (the run report's)
    drawn = driver.execute_script(
        "return Array.from(document.querySelectorAll('[data-chart]')).filter(c => c.tagName === 'IMG'"
        " || c.querySelector('svg')).length")
    assert drawn >= min_charts
    images = driver.execute_script(
        "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight, i.alt])"
    )
    broken = [alt for complete, width, height, alt in images if not (complete and width > 0 and height > 0)]
    assert not broken, f"images that failed to load: {broken}"
    failed = driver.execute_script(
        "return performance.getEntriesByType('resource').filter(e => e.responseStatus >= 400"
        " || (e.transferSize === 0 && e.decodedBodySize === 0 && !e.name.startsWith('data:'))).map(e => e.name)"
    )
    assert not failed, f"resources that failed to load: {failed}"
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, severe
    text = driver.execute_script("return document.body.innerText")
    assert len(text) > 500
    height = driver.execute_script("return document.getElementById('verdict').getBoundingClientRect().height")
    assert height > 40

    full = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(full) + 40, 16000))
    assert driver.save_screenshot(str(shot))
    driver.set_window_size(1280, 900)
    from PIL import Image

    with Image.open(io.BytesIO(shot.read_bytes())) as img:
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert img.width >= 1000 and img.height > 1000
        assert colors is None or len(colors) > 50, "the page looks blank"
    keep = os.environ.get("SCREENSHOTS_DIR")  # not VERL_HEALTH_*: conftest clears those
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)


def test_run_report_renders_in_chromium(driver, reports, tmp_path):
    _open_and_check(driver, reports / "runs" / "run-cuda-oom.html", tmp_path / "run-report.png", min_charts=2)
    assert driver.find_element("css selector", "#verdict .headline").text == "CUDA OOM"


def test_anomalous_run_report_renders_in_chromium(driver, reports, tmp_path):
    _open_and_check(driver, reports / "runs" / "run-anomalous.html", tmp_path / "run-report-anomalous.png",
                    min_charts=2)


def test_fleet_report_renders_and_links_to_run_reports(driver, reports, tmp_path):
    _open_and_check(driver, reports / "fleet" / "latest.html", tmp_path / "fleet-report.png", min_charts=3)
    link = driver.find_element("css selector", "#attention-table a[href$='run-cuda-oom.html']")
    link.click()
    assert driver.current_url == (reports / "runs" / "run-cuda-oom.html").resolve().as_uri()
    assert driver.find_element("css selector", "#run-id").text == "run-cuda-oom"


def test_hostile_log_text_does_not_run(driver, reports, tmp_path):
    from selenium.common.exceptions import NoAlertPresentException

    _open_and_check(driver, reports / "runs" / "run-hostile.html", tmp_path / "run-report-hostile.png",
                    min_charts=2)
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018
    cause = driver.find_element("css selector", "#root-cause-context .cause").text
    assert "<script>alert('pwned')</script>" in cause


def _page_scrolls_sideways(driver) -> bool:
    return driver.execute_script(
        "return document.documentElement.scrollWidth > document.documentElement.clientWidth + 1")


@pytest.mark.parametrize("page", ["fleet/latest.html", "runs/run-cuda-oom.html", "runs/run-anomalous.html"])
def test_no_sideways_page_scroll_on_a_phone_or_a_laptop(driver, reports, page):
    """At 400 px (a phone) and 1400 px the page never scrolls sideways: wide tables scroll in their own box."""
    try:
        for width in (400, 1400):
            driver.set_window_size(width, 900)
            _load(driver, (reports / page).resolve().as_uri())
            assert not _page_scrolls_sideways(driver), (page, width)
    finally:
        driver.set_window_size(1280, 900)


def _luminance(css: str) -> float:
    r, g, b = (int(x) for x in css[css.index("(") + 1:css.index(")")].split(",")[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _light_and_dark(driver, page: Path, script: str):
    """What `script` returns on `page` under the light scheme, then under prefers-color-scheme: dark."""
    _load(driver, page.resolve().as_uri())
    light = driver.execute_script(script)
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                           {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        _load(driver, page.resolve().as_uri())
        dark = driver.execute_script(script)
    finally:
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    return light, dark


def test_dark_mode_darkens_the_page(driver, reports):
    """Under prefers-color-scheme: dark the page background is dark and its text light."""
    (light_bg, light_ink), (dark_bg, dark_ink) = _light_and_dark(
        driver, reports / "runs" / "run-cuda-oom.html",
        "const s = getComputedStyle(document.body); return [s.backgroundColor, s.color]")
    assert _luminance(light_bg) > 200 and _luminance(light_ink) < 60
    assert _luminance(dark_bg) < 40 and _luminance(dark_ink) > 180


def test_charts_are_vector_and_the_mails_images_twice_their_pixels(driver, reports, tmp_path):
    """The reports' charts are vector (sharp on any screen); the fleet mail's chart images have at least ~2x
    the pixels of the box they are shown in (sharp on a laptop screen)."""
    _load(driver, (reports / "runs" / "run-anomalous.html").resolve().as_uri())
    assert driver.execute_script("return document.images.length") == 0
    assert driver.execute_script("return document.querySelectorAll('[data-chart] svg').length") >= 2
    _load(driver, (reports / "fleet" / "latest.html").resolve().as_uri())
    assert driver.execute_script("return document.images.length") == 0
    assert driver.execute_script("return document.querySelectorAll('[data-chart] svg').length") == 3
    from pipeline.report.render import fleet_mail_page

    mail = tmp_path / "mail.html"
    mail.write_text(fleet_mail_page(reports.parent / "wh", date(2026, 11, 28)), encoding="utf-8")
    _load(driver, mail.resolve().as_uri())
    sizes = driver.execute_script(
        "return Array.from(document.images).map(i => [i.naturalWidth, i.getBoundingClientRect().width])")
    assert len(sizes) == 3
    for natural, shown in sizes:
        assert natural >= 1.9 * shown, (natural, shown)


def test_runs_table_sorts_and_filters_in_the_browser(driver, reports):
    """Typing in the filter keeps the matching runs; clicking 'step' sorts by the number of steps."""
    from selenium.webdriver.common.by import By

    _load(driver, (reports / "fleet" / "latest.html").resolve().as_uri())
    driver.execute_script("document.querySelector('#all-runs details, details').open = true")
    table = driver.find_element(By.ID, "all-runs-table")
    every = len(table.find_elements(By.CSS_SELECTOR, "tbody tr"))
    driver.find_element(By.ID, "run-filter").send_keys("cuda")
    shown = [r.get_attribute("data-run-id") for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")
             if r.is_displayed()]
    assert shown == ["run-cuda-oom"] and every > 5
    driver.find_element(By.ID, "run-filter").clear()
    driver.execute_script("document.getElementById('run-filter').dispatchEvent(new Event('input'))")
    header = [th for th in table.find_elements(By.CSS_SELECTOR, "thead th") if th.text == "step"][0]
    header.click()
    steps = [int(r.find_elements(By.TAG_NAME, "td")[2].text.split("/")[0].replace(",", ""))
             for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert steps == sorted(steps)
    header.click()
    steps = [int(r.find_elements(By.TAG_NAME, "td")[2].text.split("/")[0].replace(",", ""))
             for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert steps == sorted(steps, reverse=True)


def test_times_carry_their_zone(driver, reports):
    """Every time shown says its zone: the runs' own (verl's log clock, which prints none) or the machine's."""
    from selenium.webdriver.common.by import By

    _load(driver, (reports / "fleet" / "latest.html").resolve().as_uri())
    driver.execute_script("document.querySelector('details').open = true")
    ended = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "#all-runs-table td.when")]
    assert len(ended) == 12 and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d log clock", e) for e in ended), ended
    for page in ("fleet/latest.html", "runs/run-anomalous.html"):
        _load(driver, (reports / page).resolve().as_uri())
        footer = driver.find_element(By.TAG_NAME, "footer").text
        assert re.search(r"on \d{4}-\d\d-\d\d \d\d:\d\d [A-Z][A-Za-z+\-0-9]+ ", footer), footer


def test_verl_signals_validation_and_sources_are_shown(driver, reports):
    """The run report shows verl's MFU and per-source validation; its advice links its public sources."""
    from selenium.webdriver.common.by import By

    _load(driver, (reports / "runs" / "run-anomalous.html").resolve().as_uri())
    mfu = driver.find_element(By.CSS_SELECTOR, "#verl-signals tr[data-key='perf/mfu/actor']")
    assert mfu.find_elements(By.TAG_NAME, "td")[1].text == "0.35"
    math = driver.find_element(By.CSS_SELECTOR, "#validation tr[data-source='lighteval/MATH']")
    assert [td.text for td in math.find_elements(By.TAG_NAME, "td")[2:5]] == ["0.31", "0.4", "0.42"]
    _load(driver, (reports / "runs" / "run-cuda-oom.html").resolve().as_uri())
    links = [a.get_attribute("href") for a in driver.find_element(By.ID, "failure-advice").find_elements(By.TAG_NAME, "a")]
    assert links == ["https://verl.readthedocs.io/en/latest/perf/perf_tuning.html",
                     "https://docs.vllm.ai/en/latest/configuration/optimization.html"]


def _plot_point(driver, panel_css: str, fx: float):
    """Viewport coordinates of a point `fx` of the way across a chart panel's plot area, mid-height."""
    from pipeline.report import charts

    return driver.execute_script(
        "const s = document.querySelector(arguments[0]); const r = s.getBoundingClientRect();"
        "const k = r.width / arguments[1];"
        "return [r.left + k * (arguments[2] + arguments[4] * (arguments[1] - arguments[2] - arguments[3])),"
        " r.top + k * (arguments[5] + (arguments[6] - arguments[5]) / 2)];",
        panel_css, charts.W, charts.LEFT, charts.RIGHT, fx, charts.TOP, charts.H - charts.BOTTOM)


def test_chart_values_show_on_hover(driver, reports):
    """Under the pointer a chart panel names the step and the value the warehouse holds for it."""
    from selenium.webdriver.common.action_chains import ActionChains

    _load(driver, (reports / "runs" / "run-anomalous.html").resolve().as_uri())
    panel = "[data-chart=health] svg[data-panel=Entropy]"
    driver.execute_script("document.querySelector(arguments[0]).scrollIntoView({block: 'center'})", panel)
    x, y = _plot_point(driver, panel, 0.5)
    column = driver.execute_script("return document.elementFromPoint(arguments[0], arguments[1])", x, y)
    title = column.find_element("css selector", "title").get_attribute("textContent")
    found = re.fullmatch(r"step (\d+) · entropy ([0-9.]+)(?: · .*)?", title)
    assert found, title
    con = lake.connect(reports.parent / "wh")
    try:
        (value,) = con.execute("select entropy from step_health where run_id = 'run-anomalous' and step = $s",
                               {"s": int(found.group(1))}).fetchone()
    finally:
        con.close()
    assert float(found.group(2)) == pytest.approx(value, rel=5e-3)
    before = float(driver.execute_script("return getComputedStyle(arguments[0]).opacity", column))
    ActionChains(driver).move_to_element(column).perform()
    after = float(driver.execute_script("return getComputedStyle(arguments[0]).opacity", column))
    assert before == 0 and after > 0


def test_charts_follow_dark_mode(driver, reports):
    """The run report's curves and chart text change colour under prefers-color-scheme: dark."""
    (light_curve, light_text), (dark_curve, dark_text) = _light_and_dark(
        driver, reports / "runs" / "run-anomalous.html",
        "const c = document.querySelector('[data-chart=health] path.l.s0');"
        "const t = document.querySelector('[data-chart=health] text');"
        "return [getComputedStyle(c).stroke, getComputedStyle(t).fill]")
    assert light_curve != dark_curve
    assert _luminance(light_text) < 100 and _luminance(dark_text) > 180


@pytest.fixture(scope="module")
def sample_reports(tmp_path_factory):
    """Run reports of real logs: two that print sampled generations (08: 68 long ones; 20: one), and 27,
    whose events table names its 67-character file."""
    import time

    from pipeline import derive
    from pipeline.ingest import discover_runs, ingest_run

    root = tmp_path_factory.mktemp("browser_samples")
    archive = root / "archive"
    archive.mkdir()
    real = Path(__file__).resolve().parents[2] / "shared" / "real-logs"
    for name in ("08_eto_megatron_grpo_qwen7b_math_two_runs_second_ctrl_c_step11.log",
                 "20_eto_fsdp_qwen7b_raytaskerror_actordied_step1.log",
                 "27_charcount_grpo_final_step_hardwrapped_benign_sigterm_at_exit.log"):
        shutil.copy2(real / name, archive / name)
    entries = discover_runs(archive, quiet_period_s=0, now=time.time() + 10**7).entries
    for entry in entries:
        ingest_run(entry, root / "wh")
    derive.derive_run_tables(root / "wh", [e.run_id for e in entries])
    return {e.run_id[:2]: render_run_report(root / "wh", e.run_id, root / "reports") for e in entries}


def test_a_run_that_prints_samples_shows_them(driver, sample_reports):
    """Log 20's one printed response is on the page as the log has it; log 08's long ones wrap at 400 px
    (they stay inside the page's width)."""
    from selenium.webdriver.common.by import By

    real = Path(__file__).resolve().parents[2] / "shared" / "real-logs"
    text = (real / "20_eto_fsdp_qwen7b_raytaskerror_actordied_step1.log").read_text(errors="replace")
    response = re.search(r"\[response\] (.*)", text).group(1).strip()
    _load(driver, sample_reports["20"].resolve().as_uri())
    (sample,) = driver.find_elements(By.CSS_SELECTOR, "details.sample")
    assert sample.find_element(By.CSS_SELECTOR, "pre.response").is_displayed()
    assert sample.find_element(By.CSS_SELECTOR, "pre.response").text == response
    try:
        driver.set_window_size(400, 900)
        _load(driver, sample_reports["08"].resolve().as_uri())
        driver.execute_script("document.querySelectorAll('details.sample').forEach(d => d.open = true)")
        assert len(driver.find_elements(By.CSS_SELECTOR, "details.sample")) >= 6
        wider = driver.execute_script(
            "const w = document.documentElement.clientWidth;"
            "return Array.from(document.querySelectorAll('details.sample, details.sample *'))"
            ".filter(e => e.getBoundingClientRect().right > w + 1).map(e => e.tagName)")
        assert not wider
    finally:
        driver.set_window_size(1280, 900)


def test_a_long_file_name_in_events_and_problems_keeps_the_page_still_on_a_phone(driver, sample_reports):
    """Log 27's file name (67 characters, no break) is in its events table and its input problems: at 400 px
    the table scrolls inside its own box and the problem wraps, so the page does not scroll sideways."""
    name = "27_charcount_grpo_final_step_hardwrapped_benign_sigterm_at_exit.log"
    try:
        driver.set_window_size(400, 900)
        _load(driver, sample_reports["27"].resolve().as_uri())
        cell, problem = driver.execute_script(
            "return [document.querySelector('#events td.mono').textContent,"
            " document.querySelector('#problems li').textContent]")
        assert cell.startswith(name + ":") and problem.startswith(name + ":")
        assert not _page_scrolls_sideways(driver)
    finally:
        driver.set_window_size(1280, 900)


def test_a_long_root_cause_file_name_wraps_on_a_phone(driver, sample_reports):
    """Log 08's root-cause location is its 66-character file name, one token: at 400 px it wraps inside
    the page, which does not scroll sideways."""
    name = "08_eto_megatron_grpo_qwen7b_math_two_runs_second_ctrl_c_step11.log"
    try:
        driver.set_window_size(400, 900)
        _load(driver, sample_reports["08"].resolve().as_uri())
        location = driver.execute_script(
            "const e = document.querySelector('#root-cause-location, #last-line-location');"
            "return [e.textContent, e.getBoundingClientRect().right, document.documentElement.clientWidth]")
        assert location[0].startswith(name + ":")
        assert location[1] <= location[2] + 1
        assert not _page_scrolls_sideways(driver)
    finally:
        driver.set_window_size(1280, 900)


def test_an_old_fleet_is_dated_by_its_data_not_today(driver, reports, tmp_path):
    """Rendered three months after its newest run ended, the fleet report's title and heading carry the
    day of its data (2026-11-28), not the day it was rendered."""
    from selenium.webdriver.common.by import By

    warehouse = reports.parent / "wh"
    page = render_fleet_report(warehouse, tmp_path / "late", date(2027, 3, 1))
    _load(driver, page.resolve().as_uri())
    assert driver.find_element(By.TAG_NAME, "h1").text == "Fleet report · runs up to 2026-11-28"
    assert "2027-03-01" not in driver.title


def test_the_change_to_try_is_on_screen_on_a_phone(driver, reports):
    """At 400 px every field of each configuration change to try (setting, this run, try, why) lies inside
    the screen, labelled, rather than in a column scrolled out of view."""
    from selenium.webdriver.common.by import By

    try:
        driver.set_window_size(400, 900)
        _load(driver, (reports / "runs" / "run-cuda-oom.html").resolve().as_uri())
        cells = driver.find_elements(By.CSS_SELECTOR, "#run-advice td")
        assert cells
        width = driver.execute_script("return document.documentElement.clientWidth")
        for cell in cells:
            right = driver.execute_script("return arguments[0].getBoundingClientRect().right", cell)
            assert right <= width + 1, (cell.get_attribute("data-label"), right, width)
        label = driver.execute_script(
            "return getComputedStyle(arguments[0], '::before').content", cells[1])
        assert label == '"setting: "'
    finally:
        driver.set_window_size(1280, 900)


def test_every_card_value_fits_its_card(driver, analyzed_real_logs):
    """At 1400 px a run report's eight cards share a row: log 07's bottleneck, update_actor, ran under the next
    card. Every real log's card values show whole at 1400 and at 400 px."""
    clipped = []
    try:
        for width in (1400, 400):
            driver.set_window_size(width, 900)
            for page in sorted((analyzed_real_logs.reports / "runs").glob("*.html")):
                _load(driver, page.resolve().as_uri())
                clipped += [(width, page.stem, text) for text in driver.execute_script(
                    "return [...document.querySelectorAll('.card .value')]"
                    ".filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)")]
    finally:
        driver.set_window_size(1280, 900)
    assert clipped == []
