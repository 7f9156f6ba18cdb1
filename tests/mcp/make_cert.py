"""Certificates for the https:// MCP test: a certificate authority of its own and a server
certificate it signed for 127.0.0.1 and localhost, written to DIR as ca.pem, server.pem and
server.key (`make_cert.py DIR`). A client trusts the server only when told of ca.pem (for
Specula: SSL_CERT_FILE)."""
import datetime
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

out = Path(sys.argv[1])
now = datetime.datetime.now(datetime.timezone.utc)
valid = (now - datetime.timedelta(hours=1), now + datetime.timedelta(days=2))


def name(text):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text)])


ca_key = ec.generate_private_key(ec.SECP256R1())
ca = (x509.CertificateBuilder().subject_name(name("Specula test CA")).issuer_name(name("Specula test CA"))
      .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
      .not_valid_before(valid[0]).not_valid_after(valid[1])
      .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
      .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                   data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                                   encipher_only=False, decipher_only=False), critical=True)
      .sign(ca_key, hashes.SHA256()))
key = ec.generate_private_key(ec.SECP256R1())
server = (x509.CertificateBuilder().subject_name(name("localhost")).issuer_name(ca.subject)
          .public_key(key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(valid[0]).not_valid_after(valid[1])
          .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
          .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                      x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
          .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
          .sign(ca_key, hashes.SHA256()))
(out / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
(out / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
(out / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
