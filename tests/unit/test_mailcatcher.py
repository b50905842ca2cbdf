"""The in-cluster mail catcher (agentrun_dev.mailcatcher): a real process, real SMTP from smtplib, counted
through its HTTP API — and it starts where aiosmtpd cannot be imported, as in the agentrun image."""

from __future__ import annotations

import email.message
import json
import smtplib
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

BLOCK_AIOSMTPD = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] == 'aiosmtpd':\n"
    "            raise ImportError('aiosmtpd is not in the image')\n"
    "sys.meta_path.insert(0, Block())\n"
    "from agentrun_dev import mailcatcher\n"
    "sys.exit(mailcatcher.main(sys.argv[1:]))\n"
)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def test_catches_one_email_without_aiosmtpd(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCK_AIOSMTPD, "--host", "127.0.0.1", "--smtp-port", "0", "--api-port", "0",
         "--store", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        ports = json.loads(line)
        api = f"http://127.0.0.1:{ports['api_port']}"
        msg = email.message.EmailMessage()
        msg["From"], msg["To"], msg["Subject"] = "support@example.com", "ada@example.com", "Re: refund"
        msg["Message-ID"] = "<t-1042@agentrun>"
        msg.set_content("Hello Ada,\n.leading dot survives\n")
        with smtplib.SMTP("127.0.0.1", ports["smtp_port"], timeout=10) as client:
            refused = client.send_message(msg)
        assert refused == {}
        found = _get(f"{api}/messages?message_id=t-1042@agentrun&raw=1")
        assert found["count"] == 1, found
        [stored] = found["messages"]
        assert stored["rcpt_tos"] == ["ada@example.com"], stored
        assert "\n.leading dot survives" in stored["raw"], stored["raw"]
        assert _get(f"{api}/stats")["count"] == 1
        listing = subprocess.run(
            [sys.executable, "-m", "agentrun_dev.mailcatcher", "list", "--api-port", str(ports["api_port"])],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        assert listing.stdout.splitlines()[:2] == [
            "1 message(s)",
            "  support@example.com -> ada@example.com: Re: refund (Message-ID t-1042@agentrun)",
        ], listing.stdout
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert proc.returncode == 0
