#!/usr/bin/python3
"""Parses one .eml file with Python's email package (the modern policy) and prints what a mail
reader would see, as JSON: the decoded headers, the MIME structure, each part's charset, transfer
encoding and decoded text, every defect the parser noted, and the longest line in octets."""

import email
import email.policy
import email.utils
import json
import sys

raw = open(sys.argv[1], "rb").read()
message = email.message_from_bytes(raw, policy=email.policy.default)
from_name, from_address = email.utils.parseaddr(str(message["From"]))
to_name, to_address = email.utils.parseaddr(str(message["To"]))
parts = []
defects = [str(d) for d in message.defects]
if message.is_multipart():
    for part in message.iter_parts():
        defects += [str(d) for d in part.defects]
        parts.append({
            "contentType": part.get_content_type(),
            "charset": part.get_content_charset(),
            "transferEncoding": part.get("Content-Transfer-Encoding"),
            # As a reader shows it: lines end in \n (the mail carried CRLF).
            "content": part.get_content().replace("\r\n", "\n"),
        })
date = email.utils.parsedate_to_datetime(message["Date"]) if message["Date"] else None
print(json.dumps({
    "subject": str(message["Subject"]),
    "fromName": from_name,
    "fromAddress": from_address,
    "toName": to_name,
    "toAddress": to_address,
    "messageId": str(message["Message-ID"]),
    "mimeVersion": str(message["MIME-Version"]),
    "date": date.timestamp() if date else None,
    "listUnsubscribe": str(message["List-Unsubscribe"]) if message["List-Unsubscribe"] else None,
    "listUnsubscribePost": str(message["List-Unsubscribe-Post"]) if message["List-Unsubscribe-Post"] else None,
    "contentType": message.get_content_type(),
    "parts": parts,
    "defects": defects,
    "longestLine": max(len(line) for line in raw.split(b"\r\n")),
    "bareLineFeeds": raw.replace(b"\r\n", b"").count(b"\n") + raw.replace(b"\r\n", b"").count(b"\r"),
}, ensure_ascii=False))
