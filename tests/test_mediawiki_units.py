"""The MediaWiki testbed's pure parts (no root): topology rules per app, the generated Apache,
MariaDB and MediaWiki configuration, the seed content, the page types and the description."""

from __future__ import annotations

import argparse
import ipaddress
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from coordinator.cli.testbed import _topology
from coordinator.config.topology_file import load_topology
from linkgrad.errors import InputError
from linkgrad.weblog.apache_format import compile_apache
from linkgrad.weblog.textlog import parse_lines
from testbed import apache, mariadb, wiki_content
from testbed.description import DescribedWebLog
from testbed.lifecycle import describe
from testbed.mediawiki import WikiSettings, local_settings
from testbed.netns import plan_testbed
from testbed.topology import DEFAULT, MEDIAWIKI
from testbed.transactions import MEDIAWIKI_PAGES, transactions_of

DIRECTORY = Path("/var/tmp/linkgrad-testbed-mw")
PLAN = plan_testbed(MEDIAWIKI, "mw", ipaddress.IPv4Network("10.201.7.0/24"))
WEB, DB = PLAN.host("web"), PLAN.host("db")


def test_mediawiki_topology_is_client_web_db_and_the_default_is_unchanged():
    assert [(h.name, h.roles) for h in MEDIAWIKI.hosts] == [
        ("client", ("client",)), ("web", ("web",)), ("db", ("db",))]
    assert DEFAULT.app == "rubis"
    assert [h.name for h in DEFAULT.hosts] == ["client", "web", "app1", "app2", "db", "cache"]
    assert load_topology(None) is DEFAULT
    assert load_topology(None, "mediawiki") is MEDIAWIKI


@pytest.mark.parametrize(("hosts", "message"), [
    ("[{name: a, roles: [client]}, {name: b, roles: [web]}]", "no host has the role 'db'"),
    ("[{name: a, roles: [client]}, {name: b, roles: [web, db]}, {name: c, roles: [cache]}]",
     "app 'mediawiki' has no 'cache' role"),
    ("[{name: a, roles: [client]}, {name: b, roles: [web, db, app]}]",
     "app 'mediawiki' has no 'app' role"),
])
def test_mediawiki_roles_are_checked(tmp_path, hosts, message):
    path = tmp_path / "topo.yaml"
    path.write_text(f"app: mediawiki\nhosts: {hosts}\n")
    with pytest.raises(InputError, match=message):
        load_topology(path)


def test_an_unknown_app_names_the_field(tmp_path):
    path = tmp_path / "topo.yaml"
    path.write_text("app: wordpress\nhosts: [{name: a, roles: [client]}]\n")
    with pytest.raises(InputError, match=rf"{path}:1: field 'app'"):
        load_topology(path)


def test_cli_app_must_agree_with_the_topology_file(tmp_path):
    path = tmp_path / "topo.yaml"
    path.write_text("app: mediawiki\nhosts: [{name: c, roles: [client]}, {name: w, roles: [web]},"
                    " {name: d, roles: [db]}]\n")
    def args(**given: object) -> argparse.Namespace:
        return argparse.Namespace(**{"extra_query": None, "services": None, "seed": None,
                                     **given})

    assert _topology(args(topology=path, app=None)).app == "mediawiki"
    assert _topology(args(topology=None, app="mediawiki")) is MEDIAWIKI
    with pytest.raises(InputError, match="--app rubis but the topology file says app: mediawiki"):
        _topology(args(topology=path, app="rubis"))


def test_apache_conf_is_its_own_prefork_instance_with_php():
    conf = apache.apache_conf(WEB, DIRECTORY, Path("/usr/share/mediawiki"),
                              DIRECTORY / "mediawiki" / "LocalSettings.php")
    lines = conf.splitlines()
    assert f"Listen {WEB.address}:80" in lines
    assert f"ServerRoot {DIRECTORY}/apache" in lines
    assert f"PidFile {DIRECTORY}/apache/apache2.pid" in lines
    assert f"ErrorLog {DIRECTORY}/logs/apache-error.log" in lines
    assert "LoadModule mpm_prefork_module /usr/lib/apache2/modules/mod_mpm_prefork.so" in lines
    assert "LoadModule php_module /usr/lib/apache2/modules/libphp8.2.so" in lines
    assert f"SetEnv MW_CONFIG_FILE {DIRECTORY}/mediawiki/LocalSettings.php" in lines
    assert f"CustomLog {DIRECTORY}/access.log linkgrad" in lines
    assert "/etc/apache2" not in conf
    assert 'LogFormat "%h %l %u %{msec}t \\"%r\\" %>s %b %D" linkgrad' in lines
    assert apache.apache_argv(DIRECTORY)[1:] == ["-f", f"{DIRECTORY}/apache/httpd.conf",
                                                 "-DFOREGROUND"]


def test_the_log_format_reads_start_stamps_and_microseconds():
    line = ('10.201.7.1 - - 1795437165382 "GET /index.php?title=Topic_7 HTTP/1.1" 200 16045 '
            '38379\n')
    log = parse_lines([line], compile_apache(apache.LOG_FORMAT), "access.log")
    assert log.start_s[0] == pytest.approx(1795437165.382, abs=1e-6)  # Apache stamps the start
    assert log.response_s[0] == pytest.approx(0.038379, abs=1e-9)
    assert list(log.url) == ["/index.php?title=Topic_7"]
    assert log.time_resolution_s == pytest.approx(1e-3)


def test_mariadbd_reads_no_system_config_and_binds_the_db_address():
    argv = mariadb.mariadbd_argv(DB, DIRECTORY)
    assert argv[:3] == ["/usr/sbin/mariadbd", "--no-defaults", "--user=mysql"]
    assert f"--bind-address={DB.address}" in argv
    assert "--port=3306" in argv
    assert f"--datadir={DIRECTORY}/mariadb/data" in argv
    assert f"--socket={DIRECTORY}/mariadb/mariadb.sock" in argv
    assert not any("/etc/" in a or "/run/mysqld" in a for a in argv)


def test_local_settings_caches_and_database():
    text = local_settings(WikiSettings(server=f"http://{WEB.address}", db_server=DB.address,
                                       directory=DIRECTORY, secret_key="ab" * 32))
    assert text.startswith("<?php")
    assert f'$wgDBserver = "{DB.address}";' in text
    assert '$wgDBtype = "mysql";' in text
    assert "$wgMainCacheType = CACHE_NONE;" in text
    assert "$wgParserCacheType = CACHE_DB;" in text
    assert "$wgJobRunRate = 0;" in text
    assert f'$wgCacheDirectory = "{DIRECTORY}/mediawiki/cache";' in text
    # one plain connection per request: no $wgDBservers with DBO_PERSISTENT, no memcached
    assert "$wgDBservers" not in text
    assert "$wgMemCachedServers" not in text


def test_seed_content_is_a_wellformed_export_with_links_templates_categories():
    pages = wiki_content.pages()
    assert len(pages) == 42
    titles = {p.title for p in pages}
    assert {"Hub", "Topic 7", "Template:Infobox", "Category:Rivers", "Main Page"} <= titles
    hub = next(p for p in pages if p.title == "Hub").text
    assert hub.count("[[Topic ") == wiki_content.TOPICS
    assert hub.count("{{") >= 10  # templates: Infobox, Navbox, Stub, a Fact per link
    root = ET.fromstring(wiki_content.export_xml(pages, now_s=1_795_000_000))
    ns = {"mw": "http://www.mediawiki.org/xml/export-0.11/"}
    exported = root.findall("mw:page", ns)
    assert len(exported) == 42
    stamps = [p.find("mw:revision/mw:timestamp", ns).text for p in exported]
    assert stamps == sorted(stamps)  # oldest first, the last an hour before now
    assert stamps[-1] == "2026-11-18T10:06:40Z"  # 1_795_000_000 - 3600
    for p in exported:  # every title links to existing pages only (a template's parameter aside)
        text = p.find("mw:revision/mw:text", ns).text
        for target in text.split("[[")[1:]:
            name = target.split("]]")[0].split("|")[0].lstrip(":")
            assert name in titles or "{{{" in name, (p.find("mw:title", ns).text, name)


def test_page_types_have_unknown_gradients_and_the_description_is_apache():
    txs = transactions_of(MEDIAWIKI)
    assert [t.name for t in txs] == [name for name, _, _ in MEDIAWIKI_PAGES]
    assert all(t.expected["web->db"] is None and t.expected["db->web"] is None for t in txs)
    info = describe(PLAN, MEDIAWIKI, DIRECTORY)
    assert info.app == "mediawiki"
    assert info.web_log == DescribedWebLog(host="web", path=DIRECTORY / "access.log",
                                           format="apache", log_format=apache.LOG_FORMAT)
    assert info.frontend_url == f"http://{WEB.address}"
    assert info.transactions[0].url == f"http://{WEB.address}/index.php?title=Topic_7"
    assert describe(plan_testbed(DEFAULT, "tb", ipaddress.IPv4Network("10.201.8.0/24")),
                    DEFAULT, DIRECTORY).web_log.format == "nginx"
