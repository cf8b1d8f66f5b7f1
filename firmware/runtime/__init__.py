"""firmware/runtime"""
