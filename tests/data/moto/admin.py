"""What the S3 tests do to the server behind nxcc's back, with boto3 (the server's own client).

admin.py ENDPOINT ACCESS_KEY SECRET COMMAND ARGS...
  users                      -> make a writer and a read-only reader; print their keys as JSON
  mkbucket BUCKET
  put BUCKET KEY FILE
  putdir BUCKET PREFIX DIR   -> every file below DIR to PREFIX/<its path below DIR>
  getdir BUCKET PREFIX DIR   -> every object below PREFIX/ to DIR/<its key below PREFIX> (none
                                outside DIR)
  get BUCKET KEY FILE        -> download KEY to FILE
  timeget BUCKET KEY FILE N  -> download KEY to FILE N times with one client; each time's seconds
  list BUCKET                -> one line per object: KEY SIZE
  rm BUCKET KEY
"""
import json
import os
import sys

import boto3


def client(service, endpoint, key, secret):
    return boto3.client(
        service,
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
    )


def users(endpoint, key, secret):
    iam = client("iam", endpoint, key, secret)
    keys = {}
    for user, actions in [
        ("writer", ["s3:*"]),
        ("reader", ["s3:GetObject", "s3:ListBucket", "s3:HeadObject"]),
    ]:
        iam.create_user(UserName=user)
        k = iam.create_access_key(UserName=user)["AccessKey"]
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
        }
        iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps(policy))
        keys[user] = [k["AccessKeyId"], k["SecretAccessKey"]]
    print(json.dumps(keys))


def main(argv):
    endpoint, key, secret, command, args = argv[1], argv[2], argv[3], argv[4], argv[5:]
    if command == "users":
        return users(endpoint, key, secret)
    s3 = client("s3", endpoint, key, secret)
    if command == "mkbucket":
        s3.create_bucket(Bucket=args[0])
    elif command == "put":
        with open(args[2], "rb") as f:
            s3.put_object(Bucket=args[0], Key=args[1], Body=f.read())
    elif command == "putdir":
        for root, _, files in os.walk(args[2]):
            for name in files:
                path = os.path.join(root, name)
                key = args[1] + "/" + os.path.relpath(path, args[2])
                with open(path, "rb") as f:
                    s3.put_object(Bucket=args[0], Key=key, Body=f.read())
    elif command == "getdir":
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=args[0], Prefix=args[1] + "/")
        for page in pages:
            for o in page.get("Contents", []):
                rel = os.path.normpath(o["Key"][len(args[1]) + 1 :])
                if rel.startswith("..") or os.path.isabs(rel):
                    continue  # a hostile test's key: never followed out of DIR
                path = os.path.join(args[2], rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                s3.download_file(args[0], o["Key"], path)
    elif command == "get":
        s3.download_file(args[0], args[1], args[2])
    elif command == "timeget":
        import time
        for _ in range(int(args[3])):
            t = time.perf_counter()
            s3.download_file(args[0], args[1], args[2])
            print(time.perf_counter() - t)
    elif command == "list":
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=args[0])
        for page in pages:
            for o in page.get("Contents", []):
                print(o["Key"], o["Size"])
    elif command == "rm":
        s3.delete_object(Bucket=args[0], Key=args[1])
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv)
