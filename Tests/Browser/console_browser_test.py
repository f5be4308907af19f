"""Drives the support console in Debian's headless Chromium (JavaScript off) through Selenium:
sign-in, a search by transaction id, the timeline, the replay of a DEAD event with a reason and
its confirmation, a user's access in words with a promotional grant given and revoked, a DEAD
webhook delivery found on the home page and retried from its user's case, the webhook pages
(an endpoint's deliveries by status; an endpoint registered with its secret shown once, its
secret rotated, deleted), and sign-out, after which the session cookie taken before it opens nothing,
put back into the browser or sent with a plain request. Screenshots go to SCREENSHOT_DIR for a
person to look at.

Run by Tests/EndToEndTests/ConsoleBrowserTests.swift, which starts the ingress with an admin
token, a DEAD event, a subscriber and a DEAD delivery of an event about them, passes CONSOLE_URL,
ADMIN_TOKEN, TRANSACTION_ID, USER_ID, WEBHOOK_ID and DEAD_EVENT_ID,
and checks the database afterwards. Exits non-zero with the reason on the first step that fails.
"""
import http.client
import json
import os
import sys
import urllib.parse

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ["CONSOLE_URL"].rstrip("/")
TOKEN = os.environ["ADMIN_TOKEN"]
TRANSACTION = os.environ["TRANSACTION_ID"]
USER = os.environ["USER_ID"]
WEBHOOK = os.environ["WEBHOOK_ID"]
DEAD_EVENT = os.environ["DEAD_EVENT_ID"]
SHOTS = os.environ["SCREENSHOT_DIR"]
REASON = "product added (browser test)"


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def plain_request(path, headers):
    """Status and Location of a request sent outside the browser, redirects not followed."""
    url = urllib.parse.urlsplit(BASE)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("Location")
    finally:
        connection.close()


def main():
    os.makedirs(SHOTS, exist_ok=True)
    options = Options()
    options.binary_location = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1800",
                     "--disable-gpu", "--no-first-run"):
        options.add_argument(argument)
    # The console must work without JavaScript.
    options.add_experimental_option("prefs", {"profile.managed_default_content_settings.javascript": 2})
    service = Service(os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=options)
    driver.set_page_load_timeout(30)
    shot = lambda name: driver.save_screenshot(os.path.join(SHOTS, name + ".png"))

    def after_click(element_id):
        """The element of the page a click led to, once that page has arrived: a click returns
        when the navigation starts, and on a loaded machine the server's answer comes later."""
        return WebDriverWait(driver, 30).until(expected_conditions.presence_of_element_located((By.ID, element_id)))

    def run_action(form, reason, what):
        """Posts an action form with its reason (None: it takes none), confirms it, and returns the
        result page's answer."""
        if reason is not None:
            form.find_element(By.NAME, "reason").send_keys(reason)
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        after_click("confirm")
        driver.find_element(By.ID, "confirm").click()
        check("Done, audited as browser-operator" in after_click("result").text, what + " is done")
        return json.loads(driver.find_element(By.TAG_NAME, "pre").text)
    try:
        driver.get(BASE + "/admin/")
        check(driver.current_url.endswith("/admin/login"), "an anonymous visit goes to the sign-in page: " + driver.current_url)
        shot("01-sign-in")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.ID, "sign-in").click()
        after_click("q")
        check("signed in as browser-operator (operator)" in driver.page_source, "signed in")
        shot("02-search")

        driver.find_element(By.ID, "q").send_keys(TRANSACTION)
        driver.find_element(By.ID, "search").click()
        check("transactionId" in after_click("matches").text, "the id is recognised as a transaction id")
        timeline = driver.find_element(By.ID, "timeline")
        check("UNMATCHED_PRODUCT" in timeline.text, "the timeline shows the dead event")
        check(len(timeline.find_elements(By.TAG_NAME, "tr")) >= 2, "the timeline has its rows")
        shot("03-case")

        events = driver.find_element(By.ID, "events")
        form = events.find_element(By.CSS_SELECTOR, "form[action='/admin/actions/replay-event']")
        form.find_element(By.NAME, "reason").send_keys(REASON)
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        after_click("confirm")
        check("Confirm: Replay event" in driver.page_source, "a confirmation step comes first")
        check(REASON in driver.page_source, "the confirmation shows the reason")
        shot("04-confirm")
        driver.find_element(By.ID, "confirm").click()
        check("Done, audited as browser-operator" in after_click("result").text, "the replay is done")
        check('"RECEIVED"' in driver.find_element(By.TAG_NAME, "pre").text, "the event is RECEIVED again")
        shot("05-replayed")
        driver.find_element(By.ID, "back").click()
        check("DEAD_EVENT_REPLAYED" in after_click("audit").text, "the case shows the audit row")
        shot("06-case-after")

        # A user's case starts with their access in words; a promotional grant, then its revocation.
        search = driver.find_element(By.ID, "q")
        search.clear()
        search.send_keys(USER)
        driver.find_element(By.ID, "search").click()
        summary = after_click("access-summary").text
        check(summary.startswith("pro until ") and ", renews; " in summary and summary.endswith(" credits"), "access in words: " + summary)
        shot("08-access")
        form = driver.find_element(By.CSS_SELECTOR, "form[action='/admin/actions/grant-entitlement']")
        form.find_element(By.NAME, "entitlement").send_keys("beta")
        form.find_element(By.NAME, "duration").send_keys("P7D")
        form.find_element(By.NAME, "reason").send_keys("early access (browser test)")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        after_click("confirm")
        check("Confirm: Grant an entitlement" in driver.page_source, "a grant is confirmed first")
        driver.find_element(By.ID, "confirm").click()
        check("Done, audited as browser-operator" in after_click("result").text, "the grant is done")
        driver.find_element(By.ID, "back").click()
        check("beta (promotional) until " in after_click("access-summary").text, "the grant shows in words")
        check("in force" in driver.find_element(By.ID, "entitlement-grants").text, "the grant is listed in force")
        shot("09-granted")
        form = driver.find_element(By.CSS_SELECTOR, "form[action='/admin/actions/revoke-entitlement']")
        form.find_element(By.NAME, "reason").send_keys("test over (browser test)")
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        after_click("confirm")
        driver.find_element(By.ID, "confirm").click()
        check("Done, audited as browser-operator" in after_click("result").text, "the revocation is done")
        driver.find_element(By.ID, "back").click()
        check("beta" not in after_click("access-summary").text, "the revoked grant no longer gives access")
        check("revoked" in driver.find_element(By.ID, "entitlement-grants").text, "the grant is listed revoked")
        shot("10-revoked")

        # The home page lists the DEAD delivery; its link opens the user's case, where it is retried.
        driver.get(BASE + "/admin/")
        dead = after_click("dead-deliveries")
        row = [r for r in dead.find_elements(By.TAG_NAME, "tr") if DEAD_EVENT in r.text]
        check(len(row) == 1, "the home page lists the DEAD delivery: " + dead.text)
        shot("11-home-dead-delivery")
        row[0].find_element(By.LINK_TEXT, "open").click()
        outbound = after_click("outbound-events")
        check(DEAD_EVENT in outbound.text and "DEAD" in outbound.text, "the case lists the event and its DEAD delivery")
        check(USER in driver.find_element(By.ID, "user-id").text, "the link led to the user's case")
        shot("12-case-outbound")
        form = outbound.find_element(By.CSS_SELECTOR, "form[action='/admin/actions/retry-delivery']")
        retried = run_action(form, "receiver fixed (browser test)", "the retry")
        check(retried["status"] == "PENDING" and retried["eventId"] == DEAD_EVENT, "the delivery is PENDING again")
        driver.find_element(By.ID, "back").click()
        check("PENDING" in after_click("outbound-events").text, "the case shows the delivery queued again")

        # The webhook pages: the endpoint and its deliveries by status.
        driver.find_element(By.LINK_TEXT, "Webhooks").click()
        check(WEBHOOK in after_click("webhook-endpoints").text, "the endpoints list the test endpoint")
        driver.find_element(By.LINK_TEXT, WEBHOOK).click()
        check(WEBHOOK in after_click("webhook-settings").text, "the endpoint's page")
        check(DEAD_EVENT in driver.find_element(By.ID, "deliveries").text, "its deliveries")
        driver.get(BASE + "/admin/webhooks/" + WEBHOOK + "?status=DEAD")
        check(DEAD_EVENT not in after_click("deliveries").text, "no DEAD delivery is left")
        driver.get(BASE + "/admin/webhooks/" + WEBHOOK + "?status=PENDING")
        check(DEAD_EVENT in after_click("deliveries").text, "the retried delivery is PENDING")
        shot("13-webhook-deliveries")

        # An endpoint registered (its secret shown once), its secret rotated, then deleted.
        driver.get(BASE + "/admin/webhooks")
        after_click("webhook-endpoints")
        form = driver.find_element(By.CSS_SELECTOR, "form[action='/admin/actions/create-webhook']")
        form.find_element(By.NAME, "url").send_keys("https://93.184.216.34/browser-test")
        form.find_element(By.NAME, "eventTypes").send_keys("entitlement.granted, entitlement.expired")
        form.find_element(By.NAME, "description").send_keys("registered in the browser test")
        created = run_action(form, None, "the registration")
        check(driver.find_element(By.ID, "secret-once").is_displayed(), "the page says the secret is shown once")
        check(created["secret"].startswith("whsec_"), "the secret is shown")
        shot("14-webhook-created")
        driver.find_element(By.ID, "back").click()
        check(created["id"] in after_click("webhook-endpoints").text, "the new endpoint is listed")
        check(created["secret"] not in driver.page_source, "the secret is not shown again")
        driver.find_element(By.LINK_TEXT, created["id"]).click()
        after_click("webhook-settings")
        form = driver.find_element(By.CSS_SELECTOR, "form[action='/admin/actions/rotate-webhook-secret']")
        rotated = run_action(form, "rotated (browser test)", "the rotation")
        check(rotated["secret"].startswith("whsec_") and rotated["secret"] != created["secret"], "a new secret is shown")
        driver.find_element(By.ID, "back").click()
        after_click("webhook-settings")
        run_action(driver.find_element(By.CSS_SELECTOR, "form[action='/admin/actions/delete-webhook']"), "retired (browser test)", "the deletion")
        driver.find_element(By.ID, "back").click()
        check(created["id"] not in after_click("webhook-endpoints").text, "the deleted endpoint is no longer listed")
        shot("15-webhook-deleted")

        session = driver.get_cookie("admin_session")
        check(session is not None and session.get("httpOnly"), "the session cookie is there, HttpOnly")
        check(TOKEN not in session["value"], "the cookie holds a session id, not the admin token")
        copied = {"Cookie": "admin_session=" + session["value"]}
        status, _ = plain_request("/admin/queue", copied)
        check(status == 200, "a copy of the cookie opens the console before sign-out: %s" % status)
        status, _ = plain_request("/admin/v1/events/summary", {"Authorization": "Bearer " + session["value"]})
        check(status == 401, "the cookie is no bearer token of the admin API: %s" % status)

        driver.find_element(By.ID, "sign-out").click()
        after_click("token")
        check(driver.current_url.endswith("/admin/login"), "sign-out leads to the sign-in page")
        driver.get(BASE + "/admin/queue")
        check(driver.current_url.endswith("/admin/login"), "after sign-out the console is closed")
        shot("07-signed-out")

        # The cookie taken before the sign-out, put back: the server closed its session.
        driver.add_cookie({"name": "admin_session", "value": session["value"], "path": "/admin", "httpOnly": True})
        driver.get(BASE + "/admin/queue")
        check(driver.current_url.endswith("/admin/login"), "the old cookie, put back, is refused: " + driver.current_url)
        status, location = plain_request("/admin/queue", copied)
        check(status == 303 and location == "/admin/login", "the old cookie, sent again, is refused: %s %s" % (status, location))
    except Exception as error:  # noqa: BLE001 - any failure ends the run with its reason
        shot("failure")
        print("console browser test failed: %s (at %s)" % (error, driver.current_url), file=sys.stderr)
        return 1
    finally:
        driver.quit()
    print("console browser test: sign-in, search, timeline, replay, access, grant, revoke, delivery retry, webhook pages, "
          "sign-out, old cookie refused; "
          "screenshots in " + SHOTS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
