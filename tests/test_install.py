"""What installing the package asks for (issue 23 B11): the Python LeRobot 0.6.1 needs, an extra for every backend
dependency a missing-dependency message names, and no test tools in ``[all]``. The message itself is
``tests/test_registry.py::test_a_missing_dependency_names_the_extra_to_install``."""
import os
import re
import tomllib

from robo_loaders_plugin import backends

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def test_requires_python_is_what_lerobot_needs():
    """It said >=3.10 while LeRobot 0.6.1 needs 3.12: pip installed the plugin on 3.10, then LeRobot failed."""
    assert project()["requires-python"].startswith(">=3.12")


def test_every_extra_a_backend_names_exists_and_all_holds_no_test_tools():
    extras = project()["optional-dependencies"]
    named = {re.search(r"\[(\w+)\]", hint).group(1) for _, hint in (backends.TORCHDATA, backends.TORCHCODEC,
                                                                     backends.PYAV)}
    assert named <= set(extras), named - set(extras)
    assert any(d.startswith("torchdata") for d in extras["datapipe"]) and \
        {"torchcodec", "av"} <= {re.split(r"[<>=\[]", d)[0] for d in extras["video"]}
    everything = " ".join(extras["all"])
    assert "pytest" not in everything and "moto" not in everything
    assert {"pytest", "moto"} <= {re.split(r"[<>=\[]", d)[0] for d in extras["test"]}


def test_the_readme_says_how_to_install_from_a_clone_and_from_git():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert 'pip install -e ".[robomimic]"' in readme and "@ git+" in readme
