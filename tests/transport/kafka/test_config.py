"""Kafka client configuration: URL parsing, source precedence, validation, secrets, aiokafka kwargs."""
import asyncio
import dataclasses
import inspect
import os
import ssl

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, codec
from aiokafka.admin import AIOKafkaAdminClient

from streamkit.errors import ConfigError
from streamkit.transport.kafka.config import (
    KafkaClientConfig, Secret, parse_kafka_url, read_config_file)

URL = "kafka://broker:9092"
SASL_PASSWORD = "s3cr3t-sasl-Pa55"
SSL_PASSWORD = "s3cr3t-key-Pa55"
SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "alice", "sasl_password": SASL_PASSWORD}


def build(url=URL, **kwargs):
    kwargs.setdefault("environ", {})
    return KafkaClientConfig.from_sources(url, **kwargs)


def write_toml(tmp_path, text, name="streamkit.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(func, *args, **kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        func(*args, **kwargs)
    return str(info.value)


@pytest.fixture
def ca_bundle():
    system = "/etc/ssl/certs/ca-certificates.crt"
    if os.path.isfile(system):
        return system
    try:
        import certifi
    except ImportError:
        reason = f"no CA bundle: {system} is missing and certifi is not installed"
        print(reason)
        pytest.skip(reason)
    return certifi.where()


# ---------------------------------------------------------------- URL parsing

@pytest.mark.parametrize("url, servers", [
    ("kafka://h1:9092", ("h1:9092",)),
    ("kafka://h1:9092,h2:9093", ("h1:9092", "h2:9093")),
    ("kafka://h1,h2", ("h1:9092", "h2:9092")),
    ("kafka://kafka-0.kafka.svc.cluster.local", ("kafka-0.kafka.svc.cluster.local:9092",)),
    ("  KAFKA://h1 , h2:19092/ ", ("h1:9092", "h2:19092")),
    ("kafka://10.0.0.1:9094", ("10.0.0.1:9094",)),
    ("kafka://[::1]:9093,[fe80::1]", ("[::1]:9093", "[fe80::1]:9092")),
    ("kafka://h1:9092,h1", ("h1:9092",)),
])
def test_parse_kafka_url(url, servers):
    assert parse_kafka_url(url) == servers


@pytest.mark.parametrize("url, fragment", [
    ("", "empty"),
    ("   ", "empty"),
    ("kafka://", "no host"),
    ("h1:9092", "not a Kafka URL"),
    ("http://h1:9092", "not a Kafka URL"),
    ("embedded:///tmp/x", "not a Kafka URL"),
    ("kafka://h1:port", "port 'port'"),
    ("kafka://h1:", "port ''"),
    ("kafka://h1:0", "1 to 65535"),
    ("kafka://h1:70000", "1 to 65535"),
    ("kafka://h1,,h2", "empty host"),
    ("kafka://::1:9092", "brackets"),
    ("kafka://[not-ipv6]:9092", "IPv6"),
    ("kafka://h1:9092/topic", "path"),
    ("kafka://h1:9092?x=1", "query"),
    ("kafka://bad host:9092", "'bad host'"),
    ("kafka://-h1", "not a valid host"),
])
def test_parse_kafka_url_rejects_garbage(url, fragment):
    assert fragment in error_of(parse_kafka_url, url)


def test_parse_kafka_url_does_not_echo_credentials():
    message = error_of(parse_kafka_url, f"kafka://alice:{SASL_PASSWORD}@h1:9092")
    assert SASL_PASSWORD not in message
    assert "sasl_username" in message and "sasl_password" in message


def test_parse_kafka_url_rejects_non_strings():
    assert "empty" in error_of(parse_kafka_url, None)


# ---------------------------------------------------------------- defaults and precedence

def test_defaults():
    cfg = build("kafka://h1,h2:9093")
    assert cfg.bootstrap_servers == ("h1:9092", "h2:9093")
    assert cfg.security_protocol == "PLAINTEXT"
    assert cfg.ssl_check_hostname is True
    assert cfg.client_id == "streamkit"
    assert cfg.compression_type == "none"
    assert (cfg.linger_ms, cfg.max_batch_size, cfg.request_timeout_ms) == (0, 1048576, 30000)
    assert (cfg.session_timeout_ms, cfg.heartbeat_interval_ms, cfg.max_poll_interval_ms) == \
        (10000, 3000, 300000)
    assert cfg.group_instance_id is None and cfg.replication_factor is None
    assert cfg.connect_timeout_s == 30.0 and isinstance(cfg.connect_timeout_s, float)
    assert cfg.sasl_mechanism is cfg.sasl_username is cfg.sasl_password is None
    assert cfg.ssl_cafile is cfg.ssl_certfile is cfg.ssl_keyfile is cfg.ssl_password is None


def test_precedence_app_then_file_then_env(tmp_path):
    config_file = write_toml(tmp_path, """
        [kafka]
        linger_ms = 20
        client_id = "from-file"
        replication_factor = 2
    """)
    app = {"linger_ms": 10, "client_id": "from-app", "max_batch_size": 4096, "group_instance_id": "app-1"}
    env = {"STREAMKIT_KAFKA_LINGER_MS": "30", "STREAMKIT_KAFKA_REPLICATION_FACTOR": "3"}

    assert build(app_settings=app).linger_ms == 10
    assert build(app_settings=app, config_file=config_file).linger_ms == 20

    cfg = build(app_settings=app, config_file=config_file, environ=env)
    assert cfg.linger_ms == 30                  # env beats file and app
    assert cfg.replication_factor == 3          # env beats file
    assert cfg.client_id == "from-file"         # file beats app
    assert cfg.max_batch_size == 4096           # only the app sets it
    assert cfg.group_instance_id == "app-1"
    assert cfg.request_timeout_ms == 30000      # nobody sets it


def test_env_can_unset_an_optional_setting(tmp_path):
    cfg = build(app_settings={"group_instance_id": "app-1", "replication_factor": 3},
                environ={"STREAMKIT_KAFKA_GROUP_INSTANCE_ID": "", "STREAMKIT_KAFKA_REPLICATION_FACTOR": " "})
    assert cfg.group_instance_id is None and cfg.replication_factor is None


def test_config_file_from_streamkit_config_env(tmp_path):
    config_file = write_toml(tmp_path, "[kafka]\nclient_id = 'via-env-file'\n")
    cfg = build(environ={"STREAMKIT_CONFIG": str(config_file)})
    assert cfg.client_id == "via-env-file"
    # An explicit config_file wins over $STREAMKIT_CONFIG.
    other = write_toml(tmp_path, "[kafka]\nclient_id = 'explicit'\n", name="other.toml")
    assert build(config_file=other, environ={"STREAMKIT_CONFIG": str(config_file)}).client_id == "explicit"


def test_environ_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("STREAMKIT_KAFKA_CLIENT_ID", "from-os-environ")
    monkeypatch.delenv("STREAMKIT_CONFIG", raising=False)
    assert KafkaClientConfig.from_sources(URL).client_id == "from-os-environ"


def test_broker_from_config_file_when_no_url(tmp_path):
    config_file = write_toml(tmp_path, 'broker = "kafka://f1:9000,f2"\n')
    assert build(None, config_file=config_file).bootstrap_servers == ("f1:9000", "f2:9092")
    # A URL from the caller (--broker, STREAMKIT_BROKER, the app) is used as given.
    assert build("kafka://cli:1", config_file=config_file).bootstrap_servers == ("cli:1",)


def test_no_broker_anywhere():
    assert "no Kafka broker URL" in error_of(build, None)


def test_bad_broker_in_config_file_names_the_file(tmp_path):
    config_file = write_toml(tmp_path, 'broker = "http://f1"\n')
    message = error_of(build, None, config_file=config_file)
    assert str(config_file) in message and "not a Kafka URL" in message


# ---------------------------------------------------------------- environment coercion

@pytest.mark.parametrize("text, value", [
    ("true", True), ("TRUE", True), ("1", True), ("yes", True), ("Yes", True),
    ("false", False), ("False", False), ("0", False), ("no", False), (" no ", False),
])
def test_env_bool_coercion(text, value, ca_bundle):
    cfg = build(environ={"STREAMKIT_KAFKA_SECURITY_PROTOCOL": "SSL",
                         "STREAMKIT_KAFKA_SSL_CHECK_HOSTNAME": text})
    assert cfg.ssl_check_hostname is value


def test_env_number_and_string_coercion():
    cfg = build(environ={"STREAMKIT_KAFKA_LINGER_MS": "0", "STREAMKIT_KAFKA_MAX_BATCH_SIZE": " 2048 ",
                         "STREAMKIT_KAFKA_CONNECT_TIMEOUT_S": "2.5",
                         "STREAMKIT_KAFKA_COMPRESSION_TYPE": "GZIP",
                         "STREAMKIT_KAFKA_GROUP_INSTANCE_ID": "worker-7"})
    assert (cfg.linger_ms, cfg.max_batch_size, cfg.connect_timeout_s) == (0, 2048, 2.5)
    assert cfg.compression_type == "gzip"
    assert cfg.group_instance_id == "worker-7"


@pytest.mark.parametrize("name, text, expected", [
    ("STREAMKIT_KAFKA_LINGER_MS", "five", "integer >= 0"),
    ("STREAMKIT_KAFKA_LINGER_MS", "1.5", "integer >= 0"),
    ("STREAMKIT_KAFKA_LINGER_MS", "-1", "integer >= 0"),
    ("STREAMKIT_KAFKA_MAX_BATCH_SIZE", "0", "integer >= 1"),
    ("STREAMKIT_KAFKA_SSL_CHECK_HOSTNAME", "maybe", "true/false/1/0/yes/no"),
    ("STREAMKIT_KAFKA_CONNECT_TIMEOUT_S", "soon", "number > 0"),
    ("STREAMKIT_KAFKA_CONNECT_TIMEOUT_S", "nan", "number > 0"),
    ("STREAMKIT_KAFKA_SECURITY_PROTOCOL", "TLS", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ("STREAMKIT_KAFKA_COMPRESSION_TYPE", "brotli", "none, gzip, snappy, lz4, zstd"),
    ("STREAMKIT_KAFKA_CLIENT_ID", "  ", "non-empty string"),
])
def test_env_bad_values_name_the_variable(name, text, expected):
    message = error_of(build, environ={name: text})
    assert f"environment variable {name}" in message
    assert expected in message


# ---------------------------------------------------------------- unknown keys

def test_unknown_app_key_did_you_mean():
    message = error_of(build, app_settings={"linger_msec": 3})
    assert "app setting kafka_config" in message
    assert "'linger_msec'" in message and "did you mean 'linger_ms'" in message
    assert "valid keys: security_protocol," in message and "connect_timeout_s" in message


def test_unknown_file_key_did_you_mean(tmp_path):
    config_file = write_toml(tmp_path, "[kafka]\nsession_timeout = 1000\n")
    message = error_of(build, config_file=config_file)
    assert str(config_file) in message and "[kafka]" in message
    assert "did you mean 'session_timeout_ms'" in message
    assert "valid keys:" in message


def test_unknown_env_key_did_you_mean():
    message = error_of(build, environ={"STREAMKIT_KAFKA_SASL_PASWORD": SASL_PASSWORD})
    assert "environment variable STREAMKIT_KAFKA_SASL_PASWORD" in message
    assert "did you mean 'STREAMKIT_KAFKA_SASL_PASSWORD'" in message
    assert "SECURITY_PROTOCOL" in message
    assert SASL_PASSWORD not in message


def test_env_key_must_be_upper_case():
    message = error_of(build, environ={"STREAMKIT_KAFKA_linger_ms": "3"})
    assert "did you mean 'STREAMKIT_KAFKA_LINGER_MS'" in message


def test_unknown_key_without_close_match_lists_valid_keys():
    message = error_of(build, app_settings={"zzz": 1})
    assert "did you mean" not in message and "valid keys: security_protocol" in message


def test_bootstrap_servers_key_points_at_the_url(tmp_path):
    config_file = write_toml(tmp_path, "[kafka]\nbootstrap_servers = 'h:9092'\n")
    assert "broker URL" in error_of(build, config_file=config_file)


def test_other_environment_variables_are_ignored():
    cfg = build(environ={"STREAMKIT_BROKER": "kafka://x", "KAFKA_LINGER_MS": "99", "PATH": "/bin"})
    assert cfg.linger_ms == 0


# ---------------------------------------------------------------- typed values from app and file

@pytest.mark.parametrize("settings, expected", [
    ({"linger_ms": "5"}, "integer >= 0"),
    ({"linger_ms": True}, "integer >= 0"),
    ({"max_batch_size": 0}, "integer >= 1"),
    ({"replication_factor": 0}, "integer >= 1 (or unset)"),
    ({"connect_timeout_s": 0}, "number > 0"),
    ({"connect_timeout_s": float("inf")}, "number > 0"),
    ({"ssl_check_hostname": "yes"}, "true or false"),
    ({"security_protocol": "TLS"}, "one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"client_id": ""}, "non-empty string"),
    ({"client_id": None}, "non-empty string"),
    ({"group_instance_id": 7}, "non-empty string (or unset)"),
])
def test_app_values_are_type_checked(settings, expected):
    message = error_of(build, app_settings=settings)
    key = next(iter(settings))
    assert f"app setting kafka_config['{key}']" in message
    assert expected in message


def test_file_values_are_type_checked(tmp_path):
    config_file = write_toml(tmp_path, "[kafka]\nlinger_ms = '5'\n")
    message = error_of(build, config_file=config_file)
    assert f"config file '{config_file}', [kafka] linger_ms" in message
    assert "integer >= 0" in message


def test_enums_are_normalised_and_paths_accept_pathlike(tmp_path, ca_bundle):
    cfg = build(app_settings={"security_protocol": "ssl", "compression_type": "GZIP",
                              "ssl_cafile": type(tmp_path)(ca_bundle)})
    assert cfg.security_protocol == "SSL" and cfg.compression_type == "gzip"
    assert cfg.ssl_cafile == ca_bundle and isinstance(cfg.ssl_cafile, str)


def test_heartbeat_must_be_below_session_timeout():
    message = error_of(build, app_settings={"session_timeout_ms": 3000},
                       environ={"STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS": "3000"})
    assert ("heartbeat_interval_ms (3000, environment variable "
            "STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS)") in message
    assert "session_timeout_ms (3000, app setting kafka_config['session_timeout_ms'])" in message


def test_app_settings_must_be_a_mapping():
    assert "must be a mapping" in error_of(build, app_settings=[("linger_ms", 1)])


# ---------------------------------------------------------------- TOML files

def test_read_config_file(tmp_path):
    config_file = write_toml(tmp_path, 'broker = "kafka://h:1"\n[kafka]\nlinger_ms = 1\n')
    assert read_config_file(config_file) == {"broker": "kafka://h:1", "kafka": {"linger_ms": 1}}
    assert read_config_file(write_toml(tmp_path, "", name="empty.toml")) == {"kafka": {}}


def test_invalid_toml_names_file_and_line(tmp_path):
    config_file = write_toml(tmp_path, f'[kafka]\nlinger_ms = 1\nsasl_password = "{SASL_PASSWORD}\n')
    message = error_of(build, config_file=config_file)
    assert str(config_file) in message and "not valid TOML" in message
    assert "line 3" in message
    assert SASL_PASSWORD not in message


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.toml"
    message = error_of(read_config_file, missing)
    assert str(missing) in message and "does not exist" in message


def test_config_file_is_a_directory(tmp_path):
    assert "is a directory" in error_of(read_config_file, tmp_path)


def test_config_file_not_utf8(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"[kafka]\nclient_id = '\xe9'\n")
    message = error_of(read_config_file, path)
    assert str(path) in message and ("UTF-8" in message or "TOML" in message)


def test_unknown_top_level_key(tmp_path):
    config_file = write_toml(tmp_path, "[kafak]\nlinger_ms = 1\n")
    message = error_of(read_config_file, config_file)
    assert str(config_file) in message and "'kafak'" in message
    assert "did you mean 'kafka'" in message and "broker, [kafka]" in message


def test_kafka_must_be_a_table_and_broker_a_string(tmp_path):
    message = error_of(read_config_file, write_toml(tmp_path, "kafka = 3\n", name="a.toml"))
    assert "must be a table" in message and "a.toml" in message
    message = error_of(read_config_file, write_toml(tmp_path, "broker = 9092\n", name="b.toml"))
    assert "broker must be a URL string" in message and "b.toml" in message


# ---------------------------------------------------------------- SASL

def test_sasl_config_and_kwargs():
    cfg = build(app_settings={**SASL, "sasl_mechanism": "scram-sha-512"})
    assert cfg.sasl_mechanism == "SCRAM-SHA-512"
    assert isinstance(cfg.sasl_password, Secret) and cfg.sasl_password.reveal() == SASL_PASSWORD
    kwargs = cfg.common_kwargs()
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "alice"
    assert kwargs["sasl_plain_password"] == SASL_PASSWORD
    assert kwargs["ssl_context"] is None


@pytest.mark.parametrize("missing", ["sasl_mechanism", "sasl_username", "sasl_password"])
def test_sasl_protocol_requires_mechanism_user_and_password(missing):
    settings = {k: v for k, v in SASL.items() if k != missing}
    message = error_of(build, app_settings=settings)
    assert "SASL_PLAINTEXT" in message and f"set {missing}" in message
    assert "app setting kafka_config['security_protocol']" in message
    assert SASL_PASSWORD not in message


def test_sasl_key_with_non_sasl_protocol():
    message = error_of(build, environ={"STREAMKIT_KAFKA_SASL_PASSWORD": SASL_PASSWORD})
    assert "sasl_password is set (environment variable STREAMKIT_KAFKA_SASL_PASSWORD)" in message
    assert "PLAINTEXT (default)" in message and "SASL_PLAINTEXT or SASL_SSL" in message
    assert SASL_PASSWORD not in message


def test_bad_sasl_mechanism_lists_valid_ones():
    message = error_of(build, app_settings={**SASL, "sasl_mechanism": "GSSAPI"})
    assert "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512" in message
    assert SASL_PASSWORD not in message


def test_sasl_password_of_wrong_type_is_not_echoed():
    message = error_of(build, app_settings={**SASL, "sasl_password": [SASL_PASSWORD]})
    assert "sasl_password" in message and "got a list" in message
    assert SASL_PASSWORD not in message


# ---------------------------------------------------------------- SSL

def test_ssl_with_ca_file_builds_an_ssl_context(ca_bundle):
    cfg = build(app_settings={"security_protocol": "SSL", "ssl_cafile": ca_bundle})
    context = cfg.common_kwargs()["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname is True
    assert context.cert_store_stats()["x509_ca"] > 0


def test_ssl_check_hostname_false_is_honoured(ca_bundle):
    cfg = build(app_settings={"security_protocol": "SSL", "ssl_cafile": ca_bundle,
                              "ssl_check_hostname": False})
    context = cfg.common_kwargs()["ssl_context"]
    assert context.check_hostname is False
    assert context.verify_mode == ssl.CERT_REQUIRED  # the chain is still verified


def test_sasl_ssl_without_cafile_uses_the_default_store():
    cfg = build(app_settings={**SASL, "security_protocol": "SASL_SSL"})
    kwargs = cfg.common_kwargs()
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert kwargs["sasl_plain_password"] == SASL_PASSWORD


def test_missing_cert_file_names_key_and_path(tmp_path):
    missing = tmp_path / "client.pem"
    message = error_of(build, app_settings={"security_protocol": "SSL", "ssl_certfile": str(missing)})
    assert "ssl_certfile" in message and str(missing) in message and "does not exist" in message
    assert "app setting kafka_config['ssl_certfile']" in message


def test_relative_missing_ca_file_mentions_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = error_of(build, environ={"STREAMKIT_KAFKA_SECURITY_PROTOCOL": "SSL",
                                       "STREAMKIT_KAFKA_SSL_CAFILE": "certs/ca.pem"})
    assert "'certs/ca.pem'" in message and str(tmp_path) in message
    assert "environment variable STREAMKIT_KAFKA_SSL_CAFILE" in message


def test_unreadable_ca_file_is_a_config_error(tmp_path):
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n")
    message = error_of(build, app_settings={"security_protocol": "SSL", "ssl_cafile": str(bogus)})
    assert "TLS context" in message and str(bogus) in message


def test_ssl_key_with_non_tls_protocol(ca_bundle):
    message = error_of(build, app_settings={"ssl_cafile": ca_bundle})
    assert "ssl_cafile is set" in message and "SSL or SASL_SSL" in message


def test_ssl_keyfile_needs_certfile(tmp_path):
    key = tmp_path / "client.key"
    key.write_text("x")
    message = error_of(build, app_settings={"security_protocol": "SSL", "ssl_keyfile": str(key),
                                            "ssl_password": SSL_PASSWORD})
    assert "ssl_keyfile is set" in message and "ssl_certfile is not" in message
    assert SSL_PASSWORD not in message


def test_ssl_password_needs_keyfile(tmp_path):
    cert = tmp_path / "client.pem"
    cert.write_text("x")
    message = error_of(build, app_settings={"security_protocol": "SSL", "ssl_certfile": str(cert),
                                            "ssl_password": SSL_PASSWORD})
    assert "ssl_password is set" in message and "ssl_keyfile is not" in message
    assert SSL_PASSWORD not in message


def test_bad_client_cert_is_a_config_error_without_the_password(tmp_path):
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("garbage")
    key.write_text("garbage")
    message = error_of(build, app_settings={"security_protocol": "SSL", "ssl_certfile": str(cert),
                                            "ssl_keyfile": str(key), "ssl_password": SSL_PASSWORD})
    assert "TLS context" in message and str(cert) in message
    assert SSL_PASSWORD not in message


# ---------------------------------------------------------------- compression

def test_gzip_is_always_available():
    cfg = build(app_settings={"compression_type": "gzip"})
    assert cfg.producer_kwargs()["compression_type"] == "gzip"


def test_none_compression_maps_to_none():
    assert build().producer_kwargs()["compression_type"] is None


@pytest.mark.parametrize("codec_name", ["snappy", "lz4", "zstd"])
def test_missing_codec_names_the_package(codec_name, monkeypatch):
    monkeypatch.setattr(codec, f"has_{codec_name}", lambda: False)
    message = error_of(build, environ={"STREAMKIT_KAFKA_COMPRESSION_TYPE": codec_name})
    assert "pip install cramjam" in message and f"aiokafka[{codec_name}]" in message
    assert "environment variable STREAMKIT_KAFKA_COMPRESSION_TYPE" in message


@pytest.mark.parametrize("codec_name", ["snappy", "lz4", "zstd"])
def test_present_codec_is_accepted(codec_name, monkeypatch):
    monkeypatch.setattr(codec, f"has_{codec_name}", lambda: True)
    cfg = build(app_settings={"compression_type": codec_name})
    assert cfg.producer_kwargs()["compression_type"] == codec_name


# ---------------------------------------------------------------- aiokafka kwargs

def test_kwargs_contents():
    cfg = build("kafka://h1,h2:9093", app_settings={
        "client_id": "svc", "linger_ms": 0, "max_batch_size": 512, "request_timeout_ms": 5000,
        "session_timeout_ms": 6000, "heartbeat_interval_ms": 2000, "max_poll_interval_ms": 60000,
        "fetch_max_wait_ms": 20, "group_instance_id": "svc-0"})
    common = {"bootstrap_servers": "h1:9092,h2:9093", "client_id": "svc",
              "security_protocol": "PLAINTEXT", "ssl_context": None, "request_timeout_ms": 5000}
    assert cfg.common_kwargs() == common
    assert cfg.producer_kwargs() == {**common, "compression_type": None, "linger_ms": 0,
                                     "max_batch_size": 512}
    assert cfg.consumer_kwargs() == {**common, "session_timeout_ms": 6000, "heartbeat_interval_ms": 2000,
                                     "max_poll_interval_ms": 60000, "fetch_max_wait_ms": 20,
                                     "group_instance_id": "svc-0"}
    assert cfg.admin_kwargs() == common
    assert "group_instance_id" not in build().consumer_kwargs()


def test_every_kwarg_is_in_the_aiokafka_signatures():
    cfg = build(app_settings={**SASL, "group_instance_id": "g-0"})
    for kwargs, client in ((cfg.producer_kwargs(), AIOKafkaProducer),
                           (cfg.consumer_kwargs(), AIOKafkaConsumer),
                           (cfg.admin_kwargs(), AIOKafkaAdminClient)):
        accepted = set(inspect.signature(client.__init__).parameters)
        assert set(kwargs) <= accepted, (client.__name__, set(kwargs) - accepted)


@pytest.mark.parametrize("settings", [
    {"group_instance_id": "g-0", "compression_type": "gzip"},
    SASL,
])
def test_real_aiokafka_clients_accept_the_kwargs(settings):
    cfg = build("kafka://127.0.0.1:1,127.0.0.1:2", app_settings=settings)

    async def construct():
        producer = AIOKafkaProducer(**cfg.producer_kwargs())
        consumer = AIOKafkaConsumer("topic", group_id="g", **cfg.consumer_kwargs())
        admin = AIOKafkaAdminClient(**cfg.admin_kwargs())
        try:
            return producer, consumer, admin
        finally:  # never started, so nothing connects
            await producer.stop()
            await consumer.stop()
            await admin.close()

    producer, consumer, admin = asyncio.run(construct())
    assert producer.client._bootstrap_servers == "127.0.0.1:1,127.0.0.1:2"
    assert consumer._client._client_id == "streamkit"
    assert admin._client._security_protocol == cfg.security_protocol


def test_real_aiokafka_clients_accept_an_ssl_context(ca_bundle):
    cfg = build(app_settings={"security_protocol": "SSL", "ssl_cafile": ca_bundle})

    async def construct():
        producer = AIOKafkaProducer(**cfg.producer_kwargs())
        await producer.stop()
        return producer

    assert isinstance(asyncio.run(construct()).client._ssl_context, ssl.SSLContext)


# ---------------------------------------------------------------- secrets

def test_secret():
    secret = Secret(SASL_PASSWORD)
    assert repr(secret) == str(secret) == f"{secret}" == "***"
    assert secret.reveal() == SASL_PASSWORD
    assert secret == Secret(SASL_PASSWORD) and secret != Secret("other") and secret != SASL_PASSWORD
    assert hash(secret) == hash(Secret(SASL_PASSWORD))


def test_secrets_never_shown(ca_bundle):
    cfg = build(app_settings={**SASL, "security_protocol": "SASL_SSL", "ssl_cafile": ca_bundle})
    description = cfg.describe()
    assert description["sasl_password"] == "***" and description["ssl_password"] is None
    assert description["bootstrap_servers"] == ["broker:9092"]
    assert "ssl_context" not in description
    assert set(description) == {f.name for f in dataclasses.fields(cfg)}
    for text in (repr(cfg), str(cfg), str(description), f"{cfg}", repr(cfg.sasl_password)):
        assert SASL_PASSWORD not in text
    assert "sasl_password='***'" in repr(cfg)


def test_ssl_password_not_shown():
    # A valid ssl_password needs a real encrypted key, and these tests generate no certificates,
    # so plant the secret on a built config to check only how it is displayed.
    cfg = build()
    object.__setattr__(cfg, "ssl_password", Secret(SSL_PASSWORD))
    assert cfg.describe()["ssl_password"] == "***"
    assert SSL_PASSWORD not in repr(cfg) and SSL_PASSWORD not in str(cfg.describe())


# ---------------------------------------------------------------- direct construction

def test_direct_construction_is_validated_and_normalised():
    cfg = KafkaClientConfig(bootstrap_servers=["h1", "h2:1"], security_protocol="sasl_plaintext",
                            sasl_mechanism="PLAIN", sasl_username="u", sasl_password=SASL_PASSWORD)
    assert cfg.bootstrap_servers == ("h1:9092", "h2:1")
    assert cfg.security_protocol == "SASL_PLAINTEXT"
    assert isinstance(cfg.sasl_password, Secret)
    assert SASL_PASSWORD not in repr(cfg)
    message = error_of(KafkaClientConfig, bootstrap_servers=("h1",), linger_ms=-1)
    assert "KafkaClientConfig argument linger_ms" in message
    assert "bootstrap_servers" in error_of(KafkaClientConfig, bootstrap_servers="h1:9092")


def test_config_is_frozen_and_comparable():
    cfg = build(app_settings=SASL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.linger_ms = 1
    assert cfg == build(app_settings=SASL)
    assert cfg != build(app_settings={**SASL, "sasl_password": "other"})
    assert dataclasses.replace(cfg, linger_ms=9).linger_ms == 9
