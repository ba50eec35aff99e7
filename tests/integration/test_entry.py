"""Opening "/": a browser lands on the dashboard (302 to /ui/) even when an
API token is set (the page asks for it); an API client opening "/" gets what
it got before (401 without the token, 404 with it)."""

from helpers import http_request_text

TOKEN = "entry-token-0123456789abcdef"
CHROME = ("text/html,application/xhtml+xml,application/xml;q=0.9,"
          "image/avif,image/webp,*/*;q=0.8")


def root(svc, headers):
    return http_request_text(svc.port, "/", headers=headers)


def test_a_browser_opening_root_lands_on_the_dashboard_with_a_token(service):
    svc = service(wait="health", extra_env={"RMQS_API_TOKEN": TOKEN})
    for browser in ({"Accept": CHROME},
                    {"Accept": "*/*", "Sec-Fetch-Mode": "navigate"},
                    {"Accept": "text/html"}):
        resp = root(svc, browser)
        assert resp.status == 302, (browser, resp.status, resp.text)
        assert resp.headers["Location"] == "/ui/", browser
        assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
    # and the dashboard it lands on is served without the token (its
    # files are not part of the API contract)
    page = http_request_text(svc.port, "/ui/", headers={"Accept": CHROME},
                             check_contract=False)
    assert page.status == 200 and "<html" in page.text

    # API clients: curl's */*, JSON first, nothing at all
    for client in ({"Accept": "*/*"}, {"Accept": "application/json, text/html"},
                   {}):
        resp = root(svc, client)
        assert resp.status == 401, (client, resp.status, resp.text)
        resp = root(svc, dict(client, Authorization=f"Bearer {TOKEN}"))
        assert resp.status == 404, (client, resp.status, resp.text)
    # another path with browser headers still needs the token
    assert http_request_text(svc.port, "/jobs", headers={"Accept": CHROME}).status == 401


def test_without_a_token_a_browser_is_redirected_and_ui_off_is_not(service):
    svc = service()
    resp = root(svc, {"Accept": CHROME})
    assert resp.status == 302 and resp.headers["Location"] == "/ui/"
    assert root(svc, {"Accept": "*/*"}).status == 404
    off = service("--ui", "off", wait="health", extra_env={"RMQS_API_TOKEN": TOKEN})
    assert root(off, {"Accept": CHROME}).status == 401
