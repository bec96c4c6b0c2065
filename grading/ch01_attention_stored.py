"""The values grading/ch01_attention.py's hidden checks compare with, stored by `make source`
(coursekit.author.probes.write_stored): computing them took every graded kernel its time.
Generated: do not edit; tests/test_sync.py proves them current."""
TORCH = '2.13.0+cpu'
VALUES = {
    'score_variance(16, n_samples=100000, scaled=False, seed=6)': 16.009675807788106,
    'score_variance(16, n_samples=20000, scaled=False, seed=16)': 16.108464979383854,
    'score_variance(16, n_samples=20000, scaled=True, seed=17)': 1.013266901934624,
    'score_variance(200, n_samples=20000, scaled=False, seed=200)': 197.00586602175153,
    'score_variance(200, n_samples=20000, scaled=True, seed=201)': 0.9831059623692927,
    'score_variance(64, n_samples=20000, scaled=False, seed=64)': 64.21285138920109,
    'score_variance(64, n_samples=20000, scaled=True, seed=65)': 0.994554774452753,
}
