"""An SNS topic: the digest as the message (JSON), a short subject."""

from __future__ import annotations

import json

from engine.notify.digest import Digest

SUBJECT_LIMIT = 100  # SNS's limit on a subject


def send_sns(arn: str, digest: Digest) -> None:
    import boto3
    from botocore.config import Config

    region = arn.split(":")[3]
    config = Config(connect_timeout=3, read_timeout=5, retries={"max_attempts": 1})
    client = boto3.client("sns", region_name=region, config=config)
    count = len(digest.new)
    subject = f"gpuwarden: {count} new failing finding{'s' * (count != 1)}"[:SUBJECT_LIMIT]
    client.publish(TopicArn=arn, Subject=subject, Message=json.dumps(digest.to_json_dict()))
