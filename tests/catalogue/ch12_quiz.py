"""Known wrong answers (and correct variants) for ch12_quiz, the chapter quiz.

A wrong answer must lose the points of its question and the feedback must
name the question, the chapter to reread and, for a known misconception, why
the answer is wrong (the zh build is graded here). Answers of the wrong form
("4" for 4, 3 for a letter, a repeated letter, None) lose the points with a
message about the form. Equivalent correct answers (lower case, a list or a
set instead of a string, a number within tolerance written differently) keep
full marks."""
from harness import Variant


def ans(**answers: str) -> dict:
    """Answer cells as a student would fill them: ``q01_sqrt_dk='"B"'`` -> {grade id: code}."""
    return {name: f"{name} = {code}\n" for name, code in answers.items()}


# One wrong answer for every auto-graded question (the right ones live in grading/ch12_quiz.py).
ALL_WRONG = dict(
    q01_sqrt_dk='"A"', q02_dot_variance="8", q03_causal_mask='"B"', q04_first_row='"A"', q05_masked_zeros="15",
    q06_bert_gpt='"AB"', q08_heads='"ABC"', q10_permutation='"A"', q11_rope_relative='"A"',
    q12_positions='"ABCDE"', q13_pre_ln='"A"', q14_why_pre_ln='"C"', q15_ffn_share="0.5", q16_12Ld2="4 * 24 * 1024**2",
    q17_gpt2_medium="406_286_336", q18_initial_loss="1 / 65", q19_clipped_component="1.0", q20_evaluation='"ABCE"',
    q21_double_context="2", q22_kv_cache='"AB"', q23_kv_bytes="2 * 32 * 4096 * 4096",
    q24_gqa="64", q25_flash='"C"', q27_induction='"A"', q28_uniform_prev="1 / 8", q29_ablation='"ABC"',
    q30_rmsnorm='"B"', q31_swiglu_params="2 * 4096 * 11008", q32_gqa_bytes="2 * 80 * 4096 * 64 * 128 * 2",
    q33_repeat_kv="0", q34_cross_attention='"B"', q35_padding='"B"', q36_bert_gpt_t5='"ABD"',
)

BUGS = [
    Variant("all_wrong", ans(**ALL_WRONG), lose=tuple(f"test_{name}" for name in ALL_WRONG),
            words=("题（q", "复习第")),
    # single choice: a distractor with a note, and one without
    Variant("q01_saves_compute", ans(q01_sqrt_dk='"B"'), lose=("test_q01_sqrt_dk",),
            words=("第 1 题", "选 B 不对", "计算量完全不变", "第 1 章（ch01_attention")),
    Variant("q03_local_window", ans(q03_causal_mask='"D"'), lose=("test_q03_causal_mask",),
            words=("第 3 题", "第 2 章（ch02_causal_mask")),
    Variant("q11_angles_add", ans(q11_rope_relative='"A"'), lose=("test_q11_rope_relative",),
            words=("第 11 题", "不是相加", "第 4 章（ch04_positions")),
    Variant("q13_post_ln", ans(q13_pre_ln='"A"'), lose=("test_q13_pre_ln",), words=("第 13 题", "Post-LN")),
    # several answers: partly right (a subset and a superset)
    Variant("q06_subset", ans(q06_bert_gpt='"AB"'), lose=("test_q06_bert_gpt",),
            words=("第 6 题", "不完全一致", "第 2 章"), breaks=("q06-all",)),
    Variant("q08_superset", ans(q08_heads='["A", "B", "C", "E"]'), lose=("test_q08_heads",),
            words=("第 8 题", "不完全一致", "第 3 章（ch03_multi_head"), breaks=("q08-all",)),
    # numbers out of tolerance, with the misconception named
    Variant("q02_std", ans(q02_dot_variance="8"), lose=("test_q02_dot_variance",), words=("第 2 题", "标准差")),
    Variant("q05_diagonal", ans(q05_masked_zeros="15"), lose=("test_q05_masked_zeros",), words=("对角线",)),
    Variant("q15_percent", ans(q15_ffn_share="66.7"), lose=("test_q15_ffn_share",), words=("百分数",),
            breaks=("q15-fraction",)),
    Variant("q16_attention_only", ans(q16_12Ld2="4 * 24 * 1024**2"), lose=("test_q16_12Ld2",),
            words=("第 16 题", "漏了 FFN", "第 6 章（ch06_param_count")),
    Variant("q16_off_by_10pct", ans(q16_12Ld2="3.3e8"), lose=("test_q16_12Ld2",), words=("±2%",)),
    Variant("q17_untied", ans(q17_gpt2_medium="24 * (12 * 1024**2 + 13 * 1024) + 2 * 50257 * 1024 + 1024**2 + 2048"),
            lose=("test_q17_gpt2_medium",), words=("第 17 题", "共享权重")),
    Variant("q21_linear", ans(q21_double_context="2"), lose=("test_q21_double_context",),
            words=("第 21 题", "线性", "第 8 章（ch08_efficiency")),
    Variant("q23_only_k", ans(q23_kv_bytes="32 * 4096 * 4096 * 2"), lose=("test_q23_kv_bytes",), words=("因子 2",)),
    Variant("q24_mqa", ans(q24_gqa="64"), lose=("test_q24_gqa",), words=("MQA",)),
    # chapter 7: the probability for the loss, clipping each component, eval() taken for a freeze
    Variant("q18_q20_training_misconceptions",
            ans(q18_initial_loss="1 / 65", q19_clipped_component="1.0", q20_evaluation='"ABCE"'),
            lose=("test_q18_initial_loss", "test_q19_clipped_component", "test_q20_evaluation"),
            words=("题（q", "第 7 章（ch07_gpt，训练一个 GPT）")),
    # answers of the wrong form: no points, a message about the form, no crash
    Variant("form_string_for_number", ans(q21_double_context='"4"'), lose=("test_q21_double_context",),
            words=("格式不对", "字符串")),
    Variant("form_int_for_letter", ans(q01_sqrt_dk="3"), lose=("test_q01_sqrt_dk",), words=("格式不对", "数字 3")),
    Variant("form_repeated_letter", ans(q06_bert_gpt='["A", "A"]'), lose=("test_q06_bert_gpt",), words=("重复",)),
    Variant("form_none", ans(q10_permutation="None"), lose=("test_q10_permutation",), words=("还没有作答",)),
    Variant("form_two_letters_for_one", ans(q14_why_pre_ln='"CD"'), lose=("test_q14_why_pre_ln",),
            words=("只选一个",)),
    Variant("form_list_for_one", ans(q25_flash='["A"]'), lose=("test_q25_flash",), words=("不要用列表",)),
    Variant("form_unknown_letter", ans(q12_positions='"ACF"'), lose=("test_q12_positions",), words=("不认识",)),
    Variant("form_nan", ans(q24_gqa='float("nan")'), lose=("test_q24_gqa",), words=("有限",)),
    # the later chapters: a misconception with its note for each
    Variant("q27_earlier_occurrence", ans(q27_induction='"A"'), lose=("test_q27_induction",),
            words=("第 27 题", "差一个位置", "第 9 章（ch09_inside_gpt")),
    Variant("q28_ignores_causality", ans(q28_uniform_prev="1 / 8"), lose=("test_q28_uniform_prev",),
            words=("第 28 题", "i + 1 个位置")),
    Variant("q28_counts_position_0", ans(q28_uniform_prev="sum(1 / (i + 1) for i in range(1, 8)) / 8"),
            lose=("test_q28_uniform_prev",), words=("位置 0 没有前一个 token",)),
    Variant("q31_two_matrices", ans(q31_swiglu_params="2 * 4096 * 11008"), lose=("test_q31_swiglu_params",),
            words=("第 31 题", "三个矩阵", "第 10 章（ch10_llama_block")),
    Variant("q32_mha_cache", ans(q32_gqa_bytes="2 * 80 * 4096 * 64 * 128 * 2"), lose=("test_q32_gqa_bytes",),
            words=("第 32 题", "只存 8 个 K/V 头")),
    Variant("q33_repeat_order", ans(q33_repeat_kv="6 % 2"), lose=("test_q33_repeat_kv",), words=("repeat_interleave",)),
    Variant("q34_reversed", ans(q34_cross_attention='"B"'), lose=("test_q34_cross_attention",),
            words=("第 34 题", "方向反了", "第 11 章（ch11_encoder_decoder")),
    Variant("q35_rows", ans(q35_padding='"B"'), lose=("test_q35_padding",), words=("真实 token 仍然会读到填充",)),
    Variant("q36_bert_causal", ans(q36_bert_gpt_t5='"ABCD"'), lose=("test_q36_bert_gpt_t5",), words=("第 36 题",)),
]

# The answer-format rules each question states (the rule ledger): a tolerance, "must be exact", "between
# 0 and 1", "natural logarithm", "the factor", "numbered from 0", "choose all that are". Each is broken by
# an answer just past it, with the words of the message that name the rule; CORRECT below holds answers
# just inside each tolerance, so the check is neither looser nor tighter than the text.
JUST_OUTSIDE = {   # question: (answer just past the stated tolerance, its words)
    "q15_ffn_share": ("0.684", "±2%"), "q16_12Ld2": ("3.1e8", "±2%"), "q17_gpt2_medium": ("3.59e8", "±1%"),
    "q18_initial_loss": ("4.27", "±2%"), "q19_clipped_component": ("0.607", "±1%"),
    "q21_double_context": ("4.22", "±5%"), "q23_kv_bytes": ("2.2e9", "±2%"), "q28_uniform_prev": ("0.2485", "±1%"),
    "q31_swiglu_params": ("1.368e8", "±1%"), "q32_gqa_bytes": ("1.357e9", "±1%"),
}
JUST_INSIDE = dict(q15_ffn_share="0.676", q16_12Ld2="3.06e8", q17_gpt2_medium="3.575e8", q18_initial_loss="4.23",
                   q19_clipped_component="0.604", q21_double_context="4.18", q23_kv_bytes="2.18e9",
                   q28_uniform_prev="0.2465", q31_swiglu_params="1.36e8", q32_gqa_bytes="1.35e9")
BUGS += [
    Variant(f"{name[:3]}_just_outside_tolerance", ans(**{name: answer}), lose=(f"test_{name}",),
            words=(f"第 {int(name[1:3])} 题", f"允许的相对误差 {tol}"), breaks=(f"{name[:3]}-tol",))
    for name, (answer, tol) in JUST_OUTSIDE.items()
] + [
    Variant("q02_simulated", ans(q02_dot_variance="63.8"), lose=("test_q02_dot_variance",),
            words=("第 2 题", "必须完全正确"), breaks=("q02-exact",)),
    Variant("q05_near", ans(q05_masked_zeros="10.2"), lose=("test_q05_masked_zeros",),
            words=("第 5 题", "必须完全正确"), breaks=("q05-exact",)),
    Variant("q24_near", ans(q24_gqa="7.9"), lose=("test_q24_gqa",), words=("第 24 题", "必须完全正确"),
            breaks=("q24-exact",)),
    Variant("q24_share_not_factor", ans(q24_gqa="8 / 64"), lose=("test_q24_gqa",), words=("倍数",),
            breaks=("q24-factor",)),
    Variant("q33_near", ans(q33_repeat_kv="1.01"), lose=("test_q33_repeat_kv",), words=("第 33 题", "必须完全正确"),
            breaks=("q33-exact",)),
    Variant("q33_counts_from_1", ans(q33_repeat_kv="2"), lose=("test_q33_repeat_kv",), words=("从 0 开始编号",),
            breaks=("q33-from-0",)),
    Variant("q18_log2", ans(q18_initial_loss="__import__('math').log2(65)"), lose=("test_q18_initial_loss",),
            words=("自然对数",), breaks=("q18-ln",)),
    Variant("q12_subset", ans(q12_positions='"AC"'), lose=("test_q12_positions",), words=("第 12 题", "不完全一致"),
            breaks=("q12-all",)),
    Variant("q22_subset", ans(q22_kv_cache='"AD"'), lose=("test_q22_kv_cache",), words=("第 22 题", "不完全一致"),
            breaks=("q22-all",)),
]

CORRECT = [
    Variant("ok_just_inside_each_tolerance", ans(**JUST_INSIDE)),
    Variant("ok_lower_case_and_spaces", ans(q01_sqrt_dk='"c"', q03_causal_mask='" A "', q25_flash='"a"')),
    Variant("ok_multi_forms", ans(q06_bert_gpt='["a", "b", "d"]', q08_heads='"B, C, E"',
                                  q12_positions='{"E", "C", "A"}', q22_kv_cache='("D", "A", "C")')),
    Variant("ok_numbers_written_differently", ans(
        q02_dot_variance="64.0", q05_masked_zeros="10.0", q15_ffn_share="0.67", q16_12Ld2="3.02e8",
        q17_gpt2_medium="3.548e8", q21_double_context="4.0", q23_kv_bytes="2.147e9", q24_gqa="8")),
    Variant("ok_later_chapters_written_differently", ans(
        q18_initial_loss="__import__('math').log(65)", q19_clipped_component="0.6", q20_evaluation='["e", "b", "a"]',
        q27_induction='"b"', q28_uniform_prev="0.2454", q29_ablation='["D", "B", "A"]', q31_swiglu_params="1.3527e8",
        q32_gqa_bytes="1.342e9", q33_repeat_kv="1.0", q36_bert_gpt_t5='"C, B, A"')),
    Variant("ok_numbers_as_tensors", {"q21_double_context": "import torch\nq21_double_context = torch.tensor(2048.0)**2 / 1024**2\n",
                                      "q15_ffn_share": "from fractions import Fraction\nq15_ffn_share = Fraction(2, 3)\n"}),
]


# ------------------------------------------------------------------ browser test

# The quiz has no widget: its answers' form checks stand in (every cell kept).
WIDGET = dict(cell="expect_choice(q25_flash", labels=("✓",), ipywidgets=False, keep=("",))
