"""The dev cluster's certificates: a CA, the apiserver's serving cert, the service-account key pair, client
certs.

Authentication is by client certificate, as in a kubeadm cluster: the apiserver trusts the dev CA for clients,
and a certificate's CN is the user name and its O entries the groups. Any number of identities can be minted
at any time without restarting anything (``issue_client``), which is what lets tests act as real second users.

Files live in ``<state>/pki``, keys ``0600``. Everything is idempotent: an existing, unexpired file is kept,
so the CA (and with it every kubeconfig handed out) survives restarts.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentrun_dev import settings as settings_mod

CA_DAYS = 3650
LEAF_DAYS = 365
RENEW_BEFORE = datetime.timedelta(days=30)
"""A leaf certificate expiring within this is reissued by ``ensure``."""

# The apiserver is reached on loopback; the in-cluster names are there for clients that use them.
APISERVER_DNS = [
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
]
APISERVER_IPS = ["127.0.0.1", "10.0.0.1"]
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"


@dataclasses.dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclasses.dataclass(frozen=True)
class PKI:
    ca: Pair
    apiserver: Pair
    sa_key: Path
    """Service-account token signing key (private)."""
    sa_pub: Path
    """Service-account token verification key (public)."""
    etcd: Pair
    """etcd's serving cert (etcd listens with TLS on loopback; the apiserver is its only client)."""
    etcd_client: Pair
    front_proxy: Pair
    """The apiserver's client cert towards aggregated API servers (CN front-proxy-client)."""
    kubelet_client: Pair | None = None
    """The apiserver's client cert towards kubelets (``pods/log``): the pod runtime's log endpoint accepts
    only this certificate (CN kube-apiserver-kubelet-client)."""


KUBELET_CLIENT_CN = "kube-apiserver-kubelet-client"


def kubelet_serving(d: Path, node_name: str) -> Pair:
    """The pod runtime's serving certificate for its kubelet log endpoint (127.0.0.1), from the dev CA."""
    ca = _ensure_ca(d)
    pair = Pair(d / "kubelet-serving.crt", d / "kubelet-serving.key")
    if not _valid(pair.cert, pair.key, ca):
        _save(
            pair, _issue_pem(ca, node_name, (), server=True, client=False, dns=[node_name], ips=["127.0.0.1"])
        )
    return pair


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    tmp.replace(path)


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{path}: expected an EC private key")
    return key


def _valid(cert_path: Path, key_path: Path, ca: Pair | None = None) -> bool:
    """Present, not about to expire, and (for leaves) signed by the current CA (a new CA reissues all)."""
    if not (cert_path.exists() and key_path.exists()):
        return False
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    if ca is not None:
        try:
            cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert.read_bytes()))
        except (ValueError, TypeError, InvalidSignature):
            return False
    return cert.not_valid_after_utc - RENEW_BEFORE > _now()


def _name(cn: str, orgs: list[str] | tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
    *,
    days: int,
    ca: bool,
) -> x509.CertificateBuilder:
    """A certificate for ``key``, valid from five minutes ago for ``days``: a CA signs certificates and
    CRLs, a leaf enciphers keys (TLS)."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=ca,
                crl_sign=ca,
                key_encipherment=not ca,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )


def _ensure_ca(d: Path) -> Pair:
    pair = Pair(d / "ca.crt", d / "ca.key")
    if _valid(pair.cert, pair.key):
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("agentrun-dev-ca")
    now = _now()
    cert = (
        _builder(name, name, key, now, days=CA_DAYS, ca=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(pair.key, _key_pem(key), 0o600)
    _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)
    return pair


def _issue_pem(
    ca: Pair,
    cn: str,
    orgs: list[str] | tuple[str, ...],
    *,
    server: bool,
    client: bool,
    dns: list[str] | None = None,
    ips: list[str] | None = None,
) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a new leaf signed by ``ca``."""
    ca_key = _load_key(ca.key)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        _builder(_name(cn, orgs), ca_cert.subject, key, now, days=LEAF_DAYS, ca=False)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if dns or ips:
        sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns or []]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips or []]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def _save(dest: Pair, pems: tuple[bytes, bytes]) -> Pair:
    """Write (certificate PEM, key PEM) to ``dest``, the key readable by its owner only."""
    cert_pem, key_pem = pems
    _write(dest.key, key_pem, 0o600)
    _write(dest.cert, cert_pem, 0o644)
    return dest


def issue_client(
    s: settings_mod.Settings, user: str, groups: list[str] | tuple[str, ...]
) -> tuple[bytes, bytes]:
    """(cert PEM, key PEM) of a client certificate for ``user`` in ``groups`` (CN / O), from the dev CA."""
    ca = _ensure_ca(s.pki_dir)
    return _issue_pem(ca, user, list(groups), server=False, client=True)


def issue_server(s: settings_mod.Settings, cn: str, dns: list[str]) -> tuple[bytes, bytes]:
    """(cert PEM, key PEM) of a serving certificate for ``dns`` names, from the dev CA."""
    ca = _ensure_ca(s.pki_dir)
    return _issue_pem(ca, cn, (), server=True, client=False, dns=dns)


def _ensure_sa_keys(d: Path) -> tuple[Path, Path]:
    key_path, pub_path = d / "sa.key", d / "sa.pub"
    if key_path.exists() and pub_path.exists():
        return key_path, pub_path
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(key_path, _key_pem(key), 0o600)
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    _write(pub_path, pub, 0o644)
    return key_path, pub_path


def ensure(s: settings_mod.Settings) -> PKI:
    d = s.pki_dir
    ca = _ensure_ca(d)
    apiserver = Pair(d / "apiserver.crt", d / "apiserver.key")
    if not _valid(apiserver.cert, apiserver.key, ca):
        _save(
            apiserver,
            _issue_pem(
                ca, "kube-apiserver", (), server=True, client=False, dns=APISERVER_DNS, ips=APISERVER_IPS
            ),
        )
    etcd = Pair(d / "etcd.crt", d / "etcd.key")
    if not _valid(etcd.cert, etcd.key, ca):
        _save(
            etcd, _issue_pem(ca, "etcd", (), server=True, client=False, dns=["localhost"], ips=["127.0.0.1"])
        )
    etcd_client = Pair(d / "apiserver-etcd-client.crt", d / "apiserver-etcd-client.key")
    if not _valid(etcd_client.cert, etcd_client.key, ca):
        _save(etcd_client, _issue_pem(ca, "kube-apiserver-etcd-client", (), server=False, client=True))
    front_proxy = Pair(d / "front-proxy-client.crt", d / "front-proxy-client.key")
    if not _valid(front_proxy.cert, front_proxy.key, ca):
        _save(front_proxy, _issue_pem(ca, "front-proxy-client", (), server=False, client=True))
    kubelet_client = Pair(d / "apiserver-kubelet-client.crt", d / "apiserver-kubelet-client.key")
    if not _valid(kubelet_client.cert, kubelet_client.key, ca):
        # system:masters as kubeadm's cert had it: a real kubelet (--node=real) authorizes it without RBAC.
        _save(
            kubelet_client, _issue_pem(ca, KUBELET_CLIENT_CN, ("system:masters",), server=False, client=True)
        )
    sa_key, sa_pub = _ensure_sa_keys(d)
    return PKI(
        ca=ca,
        apiserver=apiserver,
        sa_key=sa_key,
        sa_pub=sa_pub,
        etcd=etcd,
        etcd_client=etcd_client,
        front_proxy=front_proxy,
        kubelet_client=kubelet_client,
    )


def subject_of(cert_path: Path) -> tuple[str, list[str]]:
    """(CN, [O…]) of a certificate — what the apiserver will see as user and groups."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    cn = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    orgs = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    return (cn[0] if cn else ""), orgs
