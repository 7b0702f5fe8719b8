"""A toy model added to attnsim only through the recipe of attnsim/models/base.py (a
package with keys.py and spec.py, and one registry line): tests/test_models.py
registers it and runs it through simulate, a sweep and check-grad."""
