"""The chat page of `mllm serve` in a real browser (Debian's chromium,
headless, driven by Selenium through chromedriver). Run by
cli/tests/webui.rs, which starts the server and passes a JSON spec:

  {"url", "chat_model", "prompt", "max_tokens", "expect",
   "vision_model", "image", "vision_prompt", "vision_max_tokens",
   "vision_expect", "screenshot" (a path, or null)}

`expect` and `vision_expect` are `mllm run --temp 0`'s answers. Each check
prints a line; the first failure raises (and prints the browser's console).
"""

import json
import re
import sys
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

spec = json.load(open(sys.argv[1]))
URL = spec["url"]


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = spec.get("chromium", "/usr/bin/chromium")
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,800", "--force-prefers-reduced-motion"]:
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(spec.get("chromedriver", "/usr/bin/chromedriver")))


d = browser()


def wait(cond, what, timeout=180):
    try:
        return WebDriverWait(d, timeout, poll_frequency=0.1).until(lambda _: cond())
    except Exception as e:
        raise AssertionError(f"timed out waiting for {what}") from e


def q(css):
    return d.find_element(By.CSS_SELECTOR, css)


def qs(css):
    return d.find_elements(By.CSS_SELECTOR, css)


def ok(what):
    print("ok:", what, flush=True)


def stored():
    return json.loads(d.execute_script("return localStorage.getItem('mllm.conversations')") or "[]")


def set_field(css, value):
    el = q(css)
    el.clear()
    el.send_keys(str(value))


def open_settings():
    if not q("#settings").is_displayed():
        q("#settings-toggle").click()


def ask(prompt):
    before = len(qs(".message.assistant"))
    set_field("#prompt", prompt)
    q("#send").click()
    wait(lambda: len(qs(".message.assistant")) == before + 1, "the answer's message")
    return qs(".message.assistant")[-1]


def finished(msg):
    wait(lambda: msg.get_attribute("data-state") != "streaming", "the answer to end")
    return msg.get_attribute("data-state")


def metric(name, model):
    text = urllib.request.urlopen(URL + "/metrics").read().decode()
    m = re.search(r'^mllm_%s\{model="%s"\} (\S+)$' % (name, re.escape(model)), text, re.M)
    return float(m.group(1)) if m else None


def run():
    d.get(URL + "/")
    wait(lambda: len(Select(q("#model")).options) == 2, "the model list")
    labels = [o.text for o in Select(q("#model")).options]
    assert labels == [spec["chat_model"], spec["vision_model"] + " (vision)"], labels
    ok(f"the model picker lists {labels}")

    # Settings: greedy, a short answer.
    open_settings()
    set_field("#temperature", 0)
    set_field("#max-tokens", spec["max_tokens"])
    Select(q("#model")).select_by_value(spec["chat_model"])
    assert not q("#attach-label").is_displayed(), "no image button for a text model"

    msg = ask(spec["prompt"])
    assert finished(msg) == "done", msg.text
    chunks = int(msg.get_attribute("data-chunks"))
    answer = stored()[-1]["messages"][-1]["content"]
    assert answer == spec["expect"], f"the page's answer {answer!r} is not mllm run's {spec['expect']!r}"
    shown = msg.find_element(By.CSS_SELECTOR, ".content").get_attribute("innerHTML")
    want = d.execute_script("return mllmMarkdown(arguments[0])", spec["expect"])
    assert shown == want, f"the page shows {shown!r}, not the rendered answer {want!r}"
    assert chunks > 1, f"the answer came in {chunks} chunk(s), not streamed"
    shown_stats = msg.find_element(By.CSS_SELECTOR, ".stats").text
    assert re.fullmatch(r"\d+ tokens, [\d.]+ tokens/s \(prompt: \d+ tokens, [\d.]+ tokens/s\)", shown_stats), shown_stats
    assert int(shown_stats.split()[0]) <= spec["max_tokens"], shown_stats
    ok(f"streamed answer ({chunks} chunks) equals `mllm run --temp 0`: {answer!r}")
    if spec.get("screenshot"):
        q("#settings-toggle").click()  # closed, for the picture
        d.save_screenshot(spec["screenshot"])
        q("#settings-toggle").click()
        ok(f"screenshot at {spec['screenshot']}")

    # Stop: the answer ends in the page and on the server.
    set_field("#max-tokens", 400)
    cancelled = metric("requests_cancelled_total", spec["chat_model"]) or 0
    msg = ask("Write a long story about a dragon who learns to cook.")
    wait(lambda: int(msg.get_attribute("data-chunks") or 0) >= 3, "a few streamed tokens")
    assert q("#stop").is_displayed() and not q("#send").is_enabled()
    q("#stop").click()
    assert finished(msg) == "stopped", msg.text
    assert "(stopped)" in msg.text
    assert q("#send").is_enabled() and not q("#stop").is_displayed()
    wait(lambda: (metric("requests_cancelled_total", spec["chat_model"]) or 0) == cancelled + 1,
         "the server to count the request cancelled", timeout=20)
    wait(lambda: metric("slots_busy", spec["chat_model"]) == 0, "the slot to be free", timeout=20)
    kept = stored()[-1]["messages"][-1]
    assert kept["state"] == "stopped" and kept["content"], kept
    ok(f"Stop ends the answer in the page and on the server ({len(kept['content'])} characters kept)")

    # Kept in the browser: after a reload the conversation is listed and opens.
    d.refresh()
    wait(lambda: len(Select(q("#model")).options) == 2, "the model list after a reload")
    items = qs("#conversations li")
    assert len(items) == 1, [i.text for i in items]
    items[0].find_element(By.CSS_SELECTOR, ".open").click()
    wait(lambda: len(qs(".message")) == 4, "the conversation's four messages")
    assert qs(".message.assistant")[0].get_attribute("data-state") == "done"
    assert "(stopped)" in qs(".message.assistant")[1].text
    ok("conversations are kept in the browser's storage and reopen after a reload")

    # An image for the vision model.
    q("#new-chat").click()
    assert not qs(".message")
    Select(q("#model")).select_by_value(spec["vision_model"])
    assert q("#attach-label").is_displayed(), "an image button for a vision model"
    open_settings()
    assert q("#temperature").get_attribute("value") == "0", "settings are kept across reloads"
    set_field("#max-tokens", spec["vision_max_tokens"])
    q("#attach").send_keys(spec["image"])
    wait(lambda: len(qs("#attachments img")) == 1, "the attached image's thumbnail")
    msg = ask(spec["vision_prompt"])
    assert finished(msg) == "done", msg.text
    conv = stored()
    latest = max(conv, key=lambda c: c["updated"])
    assert latest["model"] == spec["vision_model"], latest["model"]
    answer = latest["messages"][-1]["content"]
    assert answer == spec["vision_expect"], f"{answer!r} is not mllm run --image's {spec['vision_expect']!r}"
    assert qs(".message.user img"), "the sent image is shown"
    assert not qs("#attachments img"), "the attachment is cleared once sent"
    ok(f"an attached image gives `mllm run --image`'s answer: {answer!r}")

    # Reasoning is shown folded; answers are Markdown, and nothing in them is markup.
    conv.append({"id": "r1", "title": "Reasoning", "model": spec["chat_model"], "updated": 1,
                 "messages": [{"role": "user", "content": "<b>hi</b>"},
                              {"role": "assistant", "content": "**done** and `<i>x</i>`",
                               "reasoning": "step one", "state": "done"}]})
    d.execute_script("localStorage.setItem('mllm.conversations', arguments[0])", json.dumps(conv))
    d.refresh()
    wait(lambda: len(qs("#conversations li")) == 3, "three conversations")
    d.find_element(By.CSS_SELECTOR, '#conversations li[data-id="r1"] .open').click()
    wait(lambda: len(qs(".message")) == 2, "the injected conversation")
    details = q(".message.assistant details.reasoning")
    assert details.get_attribute("open") is None, "reasoning starts folded"
    assert not details.find_element(By.CSS_SELECTOR, "div").is_displayed()
    details.find_element(By.CSS_SELECTOR, "summary").click()
    assert details.find_element(By.CSS_SELECTOR, "div").text == "step one"
    html = q(".message.assistant .content").get_attribute("innerHTML")
    assert "<strong>done</strong>" in html and "<code>&lt;i&gt;x&lt;/i&gt;</code>" in html, html
    assert q(".message.user .content").text == "<b>hi</b>", "the user's text is shown as typed"
    out = d.execute_script("return mllmMarkdown(arguments[0])",
                           '<img src=x onerror=alert(1)>\n```\n<script>x</script>\n```\n[a](javascript:alert(1)) [b](https://x.org/?a=1&b="2")')
    assert "<img" not in out and "<script" not in out and 'href="javascript' not in out, out
    assert '<a href="https://x.org/?a=1&amp;b=&quot;2&quot;"' in out, out
    ok("reasoning is folded; Markdown renders, and markup in answers is shown as text")

    # Delete.
    d.find_element(By.CSS_SELECTOR, '#conversations li[data-id="r1"] .delete').click()
    wait(lambda: len(qs("#conversations li")) == 2, "the conversation deleted")
    assert all(c["id"] != "r1" for c in stored())
    assert not qs(".message")
    ok("a conversation is deleted from the list and from storage")

    severe = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, f"the browser's console has errors (a CSP violation shows here): {severe}"
    ok("no errors in the browser's console")


try:
    run()
except BaseException:
    try:
        for e in d.get_log("browser"):
            print("console:", e, file=sys.stderr)
    except Exception:
        pass
    raise
finally:
    d.quit()
