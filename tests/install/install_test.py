"""Run against the staged Python package: the module imports from the install tree and
two DHT nodes store and read a value."""
import sys

import apiary

assert apiary.__file__.startswith(sys.argv[1]), (apiary.__file__, sys.argv[1])
with apiary.DHT() as a, apiary.DHT(initial_peers=a.get_visible_maddrs()) as b:
    assert a.store("installed", [1, 2, 3], apiary.get_dht_time() + 30)
    assert b.get("installed", latest=True).value == [1, 2, 3]
print("python: the staged module works from", apiary.__file__)
