"""Test credentials for a BuildGrid with TLS, made fresh by the remote tests (run with the
BuildGrid virtual environment's Python, which has `cryptography` and `PyJWT`).

Usage: certs.py DIR [IP ...]
Writes into DIR: ca.pem (a certificate authority), server.pem/server.key (signed by it, for
127.0.0.1 and each IP given), client.pem/client.key (signed by it: mutual TLS), other-ca.pem
(an unrelated authority), secret (an HS256 key) and token (a JWT signed with it, valid 2 hours).
"""
import datetime
import ipaddress
import os
import sys

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = datetime.datetime.now(datetime.timezone.utc)


def key():
    return ec.generate_private_key(ec.SECP256R1())


def name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def authority(cn):
    k = key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(cn))
        .issuer_name(name(cn))
        .public_key(k.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - datetime.timedelta(minutes=5))
        .not_valid_after(NOW + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(k, hashes.SHA256())
    )
    return k, cert


def leaf(ca_key, ca_cert, cn, usage, ips=()):
    k = key()
    b = (
        x509.CertificateBuilder()
        .subject_name(name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(k.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - datetime.timedelta(minutes=5))
        .not_valid_after(NOW + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if ips:
        b = b.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost")] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            ),
            critical=False,
        )
    return k, b.sign(ca_key, hashes.SHA256())


def write(path, data, mode=0o600):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def pem_cert(c):
    return c.public_bytes(serialization.Encoding.PEM)


def pem_key(k):
    return k.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def main():
    out = sys.argv[1]
    ips = ["127.0.0.1"] + sys.argv[2:]
    ca_key, ca = authority("nxcc test authority")
    s_key, s_cert = leaf(ca_key, ca, "nxcc test server", ExtendedKeyUsageOID.SERVER_AUTH, ips)
    c_key, c_cert = leaf(ca_key, ca, "nxcc test client", ExtendedKeyUsageOID.CLIENT_AUTH)
    _, other = authority("an unrelated authority")
    write(os.path.join(out, "ca.pem"), pem_cert(ca), 0o644)
    write(os.path.join(out, "other-ca.pem"), pem_cert(other), 0o644)
    write(os.path.join(out, "server.pem"), pem_cert(s_cert), 0o644)
    write(os.path.join(out, "server.key"), pem_key(s_key))
    write(os.path.join(out, "client.pem"), pem_cert(c_cert), 0o644)
    write(os.path.join(out, "client.key"), pem_key(c_key))
    secret = os.urandom(32).hex()
    write(os.path.join(out, "secret"), secret.encode())
    exp = int((NOW + datetime.timedelta(hours=2)).timestamp())
    token = jwt.encode({"sub": "nxcc-tests", "exp": exp}, secret, algorithm="HS256")
    write(os.path.join(out, "token"), (token + "\n").encode())


if __name__ == "__main__":
    main()
