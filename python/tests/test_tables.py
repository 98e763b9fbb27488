"""Several named tables under one engine: `ordo.Engine({"users": ..., "items": ...})`.

A batch names rows of each table (`{name: ids}`), the step gets one array per table at the
table's own width, and oac equals the replay of its order bit for bit, table by table.
"""

import numpy as np
import pytest

import ordo

USERS, ITEMS, RANK, BATCHES = 40, 30, 4, 300


def tables():
    """Users of RANK + 1 columns (factors and a bias), items of RANK: different widths."""
    rng = np.random.Generator(np.random.PCG64(7))
    users = rng.normal(0, 0.1, (USERS, RANK + 1)).astype(np.float32)
    items = rng.normal(0, 0.1, (ITEMS, RANK)).astype(np.float32)
    return {"users": ordo.Table(USERS, RANK + 1, init=users), "items": ordo.Table(ITEMS, RANK, init=items)}


def batch_of(batch_id):
    """A few (user, item, rating) triples: the rows each table's step sees, and the payload."""
    rng = np.random.Generator(np.random.PCG64(1000 + batch_id))
    u = rng.integers(0, USERS, 6)
    i = rng.integers(0, ITEMS // 3, 6)  # popular items: batches share rows
    r = rng.normal(0, 1, 6).astype(np.float32)
    uu, ui = np.unique(u, return_inverse=True)
    iu, ii = np.unique(i, return_inverse=True)
    return {"users": uu, "items": iu}, (ui, ii, r)


def step(batch_id, ids, rows, payload):
    ui, ii, r = payload
    users, items = rows["users"], rows["items"]
    assert users.shape == (len(ids["users"]), RANK + 1) and items.shape == (len(ids["items"]), RANK)
    lr = np.float32(0.05)
    for k in range(len(r)):
        p, q = users[ui[k], :RANK], items[ii[k]]
        err = np.float32(p @ q + users[ui[k], RANK] - r[k])
        gp, gq = err * q, err * p
        users[ui[k], :RANK] -= lr * gp
        users[ui[k], RANK] -= lr * err
        items[ii[k]] -= lr * gq


def bits(t):
    return t.numpy().view(np.uint32)


def test_oac_over_named_tables_equals_the_replay_of_its_order():
    run = tables()
    engine = ordo.Engine(run, mode="oac")
    assert list(engine.tables) == ["users", "items"]
    with engine.session(step) as s:
        for b in range(BATCHES):
            s.submit(batch_of(b)[0], batch_of(b)[1], b)
        report = s.finish()
    twin = tables()
    ordo.replay(twin, list(report.order), batch_of, step)
    for name in ("users", "items"):
        assert np.array_equal(bits(run[name]), bits(twin[name])), name
    # The training moved both tables.
    assert not np.array_equal(bits(run["items"]), bits(tables()["items"]))


def test_each_table_keeps_its_own_width_and_the_one_table_form_is_unchanged():
    seen = {}

    def look(batch_id, ids, rows, payload):
        seen[batch_id] = {n: (ids[n].tolist(), rows[n].shape) for n in rows}
        rows["items"][:] += 1.0

    t = tables()
    before = t["items"].numpy()
    engine = ordo.Engine(t, mode="sync")
    with engine.session(look) as s:
        s.submit({"items": [2, 0]}, None, 0)
        s.finish()
    # Every table is in the step's dicts, a table the batch does not name with no rows.
    assert seen[0] == {"users": ([], (0, RANK + 1)), "items": ([2, 0], (2, RANK))}
    after = t["items"].numpy()
    assert np.array_equal(after[[0, 2]], before[[0, 2]] + 1.0)
    assert np.array_equal(t["users"].numpy(), tables()["users"].numpy())

    one = ordo.Table(3, 2)
    e1 = ordo.Engine(one)
    assert e1.tables is None and e1.table is one


@pytest.mark.parametrize(
    "ids, reason",
    [
        ({"nope": [0]}, "no table is named"),
        ({"items": [ITEMS]}, "out of range"),
        ({"users": [-1]}, "negative"),
    ],
)
def test_a_bad_batch_over_tables_is_refused_before_it_runs(ids, reason):
    t = tables()
    calls = []
    with ordo.Engine(t).session(lambda *a: calls.append(a)) as s:
        with pytest.raises((ordo.InvalidBatch, ValueError), match=reason):
            s.submit(ids, None, 5)
        with pytest.raises(TypeError, match="dict of table names"):
            s.submit([0, 1], None, 6)
        s.finish()
    assert calls == []


def test_bad_tables_are_refused_at_construction():
    t = ordo.Table(3, 2)
    with pytest.raises(ValueError, match="same ordo.Table"):
        ordo.Engine({"a": t, "b": t})
    with pytest.raises(ValueError, match="at least one table"):
        ordo.Engine({})
    with pytest.raises(TypeError, match="must be an ordo.Table"):
        ordo.Engine({"a": np.zeros((3, 2), np.float32)})
    with pytest.raises(TypeError, match="array, not a dict"):
        with ordo.Engine(t).session(lambda *a: None) as s:
            s.submit({"a": [0]})
    with pytest.raises(ordo.OrdoError, match="several tables"):
        ordo.Engine(tables()).table


def test_a_step_keeping_one_tables_rows_is_refused():
    kept = []
    with pytest.raises(ordo.StepFailed) as e:
        with ordo.Engine(tables()).session(lambda b, ids, rows, p: kept.append(rows["items"])) as s:
            s.submit({"items": [0]}, None, 0)
            s.finish()
    assert "kept a reference" in str(e.value.__cause__)
